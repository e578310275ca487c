"""Node maintenance from the controller: `ascendctl node drain|undrain|list`.

Draining writes the node's maintenance record (runtime/ascendctl_runtime/maintenance.py);
the nodes do the rest on their own — the gateway watcher takes the group out of the
balancer, the group's supervisor waits for its in-flight requests and stops it — and this
module waits, bounded, until they report it done. Undraining re-checks the node first (the
read-only preflight for that node alone), clears the record, and waits until the group
serves again and is back in the balancer.
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl.errors import AscendctlError, InputError
from ascendctl.inventory import Host, Inventory
from ascendctl.transport import SshPool
from ascendctl.transport.nodecall import NodeCallError, call_node

POLL_S = 1.0
REASON_MAX = 500


@dataclass
class NodeReport:
    node: str
    group: str
    ok: bool
    action: str
    steps: list[str] = field(default_factory=list)
    maintenance: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    checks: Optional[dict[str, Any]] = None

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "group": self.group, "ok": self.ok, "action": self.action,
                "steps": self.steps, "maintenance": self.maintenance, "error": self.error,
                "checks": self.checks}


def operator() -> str:
    return f"operator ({getpass.getuser()}@{socket.gethostname()})"


def _call(inv: Inventory, pool: Any, host: Host, op: str, **kwargs: Any) -> dict[str, Any]:
    try:
        return call_node(pool.conn(host.name), node=host.name, python=inv.deploy.python,
                         entry="maintenance", timeout=60,
                         request={"op": op, "kwargs": {"root": inv.deploy.root, **kwargs}})
    except NodeCallError as err:
        raise AscendctlError(f"{host.name}: {err.reason}") from None


def show_all(inv: Inventory, pool: Any = None) -> dict[str, Optional[dict[str, Any]]]:
    """Every node's maintenance record (None: serving), one call per node in parallel;
    unreachable nodes are left out."""
    if pool is None:
        with SshPool(inv.hosts) as own:
            return show_all(inv, own)
    results = pool.map(lambda conn: _call(inv, pool, inv.host(conn.name), "show"))
    return {name: (r.value or {}).get("maintenance") for name, r in results.items() if r.ok}


def groups_in_maintenance(inv: Inventory, records: dict[str, Optional[dict[str, Any]]]
                          ) -> dict[str, str]:
    """{group: why} for every serving group with a node in maintenance."""
    found: dict[str, str] = {}
    for name, record in records.items():
        if record:
            group = inv.group_of(name).name
            found.setdefault(group, f"{name} {record.get('state')} by {record.get('by')}: "
                                    f"{record.get('reason')}")
    return found


def check_reason(reason: str) -> str:
    reason = " ".join(reason.split())
    if not reason:
        raise InputError("say why the node leaves serving", field="--reason")
    if len(reason) > REASON_MAX:
        raise InputError(f"at most {REASON_MAX} characters", field="--reason")
    return reason


def drain(inv: Inventory, node: str, reason: str, *, timeout: float,
          say: Callable[[str], None] = lambda _m: None, force: bool = False) -> NodeReport:
    host = inv.host(node)
    group = inv.group_of(host).name
    report = NodeReport(node=node, group=group, ok=False, action="drain")
    with SshPool(inv.hosts) as pool:
        out = groups_in_maintenance(inv, show_all(inv, pool))
        serving = [g.name for g in inv.serving_groups if g.name not in out and g.name != group]
        if not serving and not force:
            rest = " not in maintenance" if out else ""
            raise InputError(f"{group} is the last serving group{rest}: draining it stops "
                             "the service (give --force to do it anyway)", field="NODE")
        answer = _call(inv, pool, host, "enter", node=node, state="drained", by=operator(),
                       reason=reason)
        report.maintenance = answer["maintenance"]
        if not answer["changed"]:
            report.steps.append(f"{node} was already {answer['maintenance']['state']}: "
                                f"{answer['maintenance']['reason']}")
        else:
            report.steps.append(f"{node} drained: {reason}")
        say(report.steps[-1])
        head = inv.host(inv.group(group).head)
        done = _wait(lambda: _call(inv, pool, head, "show").get("supervisor") or {},
                     lambda sup: sup.get("phase") == "maintenance"
                     and sup.get("maintenance_step") == "stopped",
                     timeout, say, lambda sup: _supervisor_words(sup))
        if done is None:
            report.error = (f"{group} did not leave service within {timeout:.0f} s (its "
                            f"supervisor on {head.name}: see `ascendctl status`)")
            return report
        report.steps.append(f"{group} out of the balancer, its requests finished, its "
                            f"engines stopped ({_supervisor_words(done)})")
        say(report.steps[-1])
    report.ok = True
    return report


def undrain(inv: Inventory, node: str, *, timeout: float, run_checks: Callable[[str], dict],
            say: Callable[[str], None] = lambda _m: None) -> NodeReport:
    host = inv.host(node)
    group = inv.group_of(host).name
    report = NodeReport(node=node, group=group, ok=False, action="undrain")
    say(f"re-checking {node} (read-only preflight)…")
    checks = run_checks(node)
    report.checks = {"exit_code": checks.get("exit_code"), "failed": _failed_checks(checks)}
    if checks.get("exit_code") not in (0, 3):
        report.error = (f"{node} fails its checks, it stays out: "
                        + "; ".join(report.checks["failed"][:10]))
        return report
    report.steps.append(f"{node} passes its checks"
                        + (" (with warnings)" if checks.get("exit_code") == 3 else ""))
    say(report.steps[-1])
    with SshPool(inv.hosts) as pool:
        answer = _call(inv, pool, host, "clear", node=node, by=operator())
        if not answer["changed"]:
            report.steps.append(f"{node} was not in maintenance")
            report.ok = True
            return report
        report.maintenance = answer["cleared"]
        report.steps.append(f"{node} returned (was {answer['cleared']['state']}: "
                            f"{answer['cleared']['reason']})")
        say(report.steps[-1])
        head = inv.host(inv.group(group).head)
        gateway = inv.gateway if inv.replicated else None

        def read() -> dict[str, Any]:
            sup = _call(inv, pool, head, "show").get("supervisor") or {}
            gate = (_call(inv, pool, gateway, "show").get("gateway") or {}) if gateway else {}
            return {"supervisor": sup, "gateway": gate}

        def serving(seen: dict[str, Any]) -> bool:
            sup = seen["supervisor"]
            back = gateway is None or group not in (seen["gateway"].get("out") or [])
            return bool(sup.get("phase") == "serving" and (sup.get("probe") or {}).get("ok")
                        and back)

        done = _wait(read, serving, timeout, say,
                     lambda seen: _supervisor_words(seen["supervisor"]))
        if done is None:
            report.error = (f"{group} is not serving in the balancer within {timeout:.0f} s "
                            "(see `ascendctl status`)")
            return report
        back = f" and is back in the balancer on {gateway.name}" if gateway else ""
        report.steps.append(f"{group} serves again{back}")
        say(report.steps[-1])
    report.ok = True
    return report


def _failed_checks(report: dict[str, Any]) -> list[str]:
    failed = []
    for result in report.get("results") or []:
        if result.get("status") == "fail":
            failed.append(f"{result.get('id')} on {result.get('node') or 'cluster'}: "
                          f"{result.get('message')}")
    return failed


def _supervisor_words(sup: dict[str, Any]) -> str:
    phase = sup.get("phase") or "unknown"
    step = sup.get("maintenance_step")
    waiting = "; ".join(sup.get("waiting_for") or [])
    return phase + (f"/{step}" if step else "") + (f": waiting for {waiting}" if waiting else "")


def _wait(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float,
          say: Callable[[str], None], words: Callable[[Any], str]) -> Any:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            seen = read()
        except AscendctlError as err:
            seen, text = None, str(err)
        else:
            if done(seen):
                return seen
            text = words(seen)
        if text != last:
            say(text)
            last = text
        if time.monotonic() > deadline:
            return None
        time.sleep(POLL_S)
