"""The cluster verdict from every node's status and the supervisor's. Pure.

`down` whenever serving is not proven: the deep probe (a real 1-token completion through
the API key on the head) fails, a rank's engine is not running, a node is unreachable, or
the group is being restarted; each reason names the node and rank. `degraded` when it
serves but something needs attention (NPU health, RoCE links, HBM held by a foreign
process, no automatic recovery, nodes on different releases). Otherwise `healthy`.
"""

from __future__ import annotations

from typing import Optional

from ascendctl_runtime.layout import UNIT_PREFIX

from ascendctl.inventory import Inventory
from ascendctl.status.maintenance import describe as describe_maintenance
from ascendctl.inventory.pd import entry_port
from ascendctl.status.model import (
    EngineUnit, GroupStatus, NodeStatus, ProxyStatus, SupervisorStatus, Verdict,
)

RUNNING = "running"


def ago(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    if seconds < 120:
        return f" {seconds:.0f} s ago"
    if seconds < 7200:
        return f" {seconds / 60:.0f} min ago"
    return f" {seconds / 3600:.1f} h ago"


def short(unit: str) -> str:
    return unit.removeprefix(UNIT_PREFIX).removesuffix(".service")


def describe_unit(node: NodeStatus, unit: EngineUnit) -> str:
    words = {"crashed": "crashed", "stopped": "stopped (systemctl stop, not a crash)",
             "not-started": "not started since the node booted", "starting": "starting",
             "stopping": "stopping", "missing": "not installed"}.get(unit.state, unit.state)
    if unit.state == "stopped" and unit.stopped_by_recovery is not None:
        words = f"stopped by recovery (generation {unit.stopped_by_recovery})"
    text = f"{node.where}: {short(unit.unit)} {words}{ago(unit.ago_s)}"
    if unit.exit:
        text += f" ({unit.exit})"
    if unit.journal and unit.state == "crashed":
        text += f": {unit.journal[:160]}"
    if unit.restarts:
        text += f"; restarted {unit.restarts} time(s) by recovery"
    return text


def describe_recovery(sup: SupervisorStatus) -> str:
    attempt = f"attempt {sup.attempt}" + (f"/{sup.max_attempts}" if sup.max_attempts else "")
    text = f"recovering ({sup.phase}, {attempt}) since{ago(sup.detected_ago_s)}: {sup.cause}"
    if sup.waiting_for:
        text += f"; waiting for {', '.join(sup.waiting_for[:3])}"
    return text


def verdict(inv: Inventory, nodes: list[NodeStatus], sup: Optional[SupervisorStatus]
            ) -> tuple[Verdict, list[str]]:
    down: list[str] = []
    attention: list[str] = []
    head = next((n for n in nodes if n.rank == 0), None)
    serves = head is not None and head.reachable and bool((head.probe or {}).get("ok"))
    for node in nodes:
        if not node.reachable:
            # the probe is the truth: a rank we cannot reach may still serve
            (attention if serves else down).append(
                f"{node.where} unreachable: {node.error}"
                + (" (the group still answers the probe)" if serves else ""))
    reachable = [n for n in nodes if n.reachable]
    undeployed = [n.name for n in reachable if not n.engine or n.release is None]
    if undeployed:
        down.append(f"not deployed on {', '.join(undeployed)} (`ascendctl deploy`)")
    releases = {n.release for n in reachable if n.release}
    if len(releases) > 1:
        attention.append("nodes disagree on the release: " + ", ".join(
            f"{n.name}={n.release}" for n in reachable))
    out = [n for n in reachable if n.maintenance]
    for node in out:
        down.append(f"{node.name} {describe_maintenance(node.maintenance)}; out of service "
                    f"until `ascendctl node undrain {node.name}`")
    for node in reachable:
        for unit in node.engine:
            if unit.state != RUNNING and not out:
                down.append(describe_unit(node, unit))
    if head is not None and head.reachable and head.engine:
        probe = head.probe or {}
        if not probe.get("ok"):
            down.append(f"no completion from {head.name}:{entry_port(inv)} (deep probe "
                        f"through the API key): {probe.get('error') or 'no answer'}")
    if sup is not None:
        if sup.phase == "gave-up" and sup.running:
            down.insert(0, f"recovery gave up: {sup.gave_up_reason}; fix the cause, then "
                        "`ascendctl deploy` (or `rollback --to` the current release)")
        elif sup.recovering:
            down.insert(0, describe_recovery(sup))
        if sup.held:
            attention.append(f"recovery held by {sup.held.get('by')} "
                             f"({sup.held.get('reason') or 'no reason given'})")
        elif sup.paused and sup.phase not in ("gave-up", "maintenance"):
            attention.append(f"recovery paused: {sup.paused}")
        if not sup.running and any(n.engine for n in reachable):
            attention.append(f"the gang supervisor on {head.name if head else 'the head'} is "
                             f"not running ({sup.unit_state}): no automatic recovery")
        if sup.error:
            attention.append(f"supervisor: {sup.error}")
    elif inv.serving.health.supervise and head is not None and head.reachable and head.engine:
        attention.append(f"no gang supervisor on {head.name}: no automatic recovery "
                         "(deployed by an older ascendctl?)")
    for node in reachable:
        attention += [f"{node.where}: {p}" for p in node.problems]
    if down:
        return Verdict.DOWN, down + attention
    return (Verdict.DEGRADED if attention else Verdict.HEALTHY), attention


def service_verdict(inv: Inventory, groups: list[GroupStatus], proxy: Optional[ProxyStatus]
                    ) -> tuple[Verdict, list[str]]:
    """The whole service: one group — its verdict (plus the proxy). Several — healthy when
    every group is, down when none serves, degraded otherwise; each reason names its group."""
    proxy_down = None
    if proxy is not None and proxy.state is not None and not proxy.state.startswith("active"):
        proxy_down = (f"the proxy on {proxy.node} (nginx, port {proxy.port}) is "
                      f"{proxy.state}: clients of the proxy reach no group")
    if len(groups) == 1:
        group = groups[0]
        reasons = list(group.reasons)
        state = group.verdict
        if proxy_down and proxy_down not in reasons:
            reasons.append(proxy_down)
            state = Verdict.DEGRADED if state == Verdict.HEALTHY else state
        return state, reasons
    reasons = [f"serving group {g.name}: {r}" for g in groups for r in g.reasons]
    serving = [g for g in groups if g.verdict != Verdict.DOWN]
    down = [g.name for g in groups if g.verdict == Verdict.DOWN]
    if proxy_down:
        return Verdict.DOWN, [proxy_down] + reasons
    if not serving:
        return Verdict.DOWN, [f"no serving group serves ({', '.join(down)})"] + reasons
    if down:
        reasons.insert(0, f"{len(down)} of {len(groups)} serving groups down "
                       f"({', '.join(down)}); {', '.join(g.name for g in serving)} "
                       "carry the traffic")
        return Verdict.DEGRADED, reasons
    if any(g.verdict == Verdict.DEGRADED for g in groups):
        return Verdict.DEGRADED, reasons
    return Verdict.HEALTHY, reasons
