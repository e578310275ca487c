"""Switch the cluster's engines from one release to another, all or nothing.

Stop the old engines (followers first), install the new units, start the ranks in order
— the head first, each rank waited for within the per-rank budget the rendered
HCCL_CONNECT_TIMEOUT was sized for — then gate on real readiness: `/v1/models` lists the
model, a completion and a streamed completion answer through the API key. If anything
fails after the old engines stopped, every node goes back to the previous release and
serves again; the caller marks the new release failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl.errors import AscendctlError
from ascendctl.inventory import Host, Inventory
from ascendctl.render.files import release_dir
from ascendctl.render.health import SUPERVISOR_UNIT
from ascendctl.render.timeouts import RANK_START_WAIT_S
from ascendctl.transport import quoting
from ascendctl.transport.errors import ConnectError

SETTLE_S = 5.0           # a follower must stay active this long to count as started
POLL_S = 2.0
PROBE_TIMEOUT_S = 120.0  # one readiness request (a cold first completion can be slow)


class StepFailed(AscendctlError):
    """A switch step failed on a node; names both."""

    def __init__(self, step: str, node: str, reason: str):
        super().__init__(f"{step} failed on {node}: {reason}")
        self.step, self.node, self.reason = step, node, reason


@dataclass
class SwitchTarget:
    release_id: str
    engine_units: dict[str, tuple[str, ...]]   # node → engine units in start order
    side_units: dict[str, tuple[str, ...]]


@dataclass
class SwitchLog:
    events: list[dict[str, Any]] = field(default_factory=list)
    on_event: Optional[Callable[[str], None]] = None

    def note(self, message: str, **data: Any) -> None:
        self.events.append({"t": round(time.time(), 3), "msg": message, **data})
        if self.on_event:
            self.on_event(message)


class Switcher:
    def __init__(self, inv: Inventory, conn_for: Callable[[str], Any], ops_for: Callable,
                 *, log: SwitchLog | None = None, become: bool | None = None):
        self.inv = inv
        self.conn_for = conn_for
        self.ops_for = ops_for
        self.log = log or SwitchLog()
        self.become = become
        self.step = "switch"          # the phase under way: names a node that drops out

    # -- remote helpers --------------------------------------------------------------

    def run(self, host: Host, argv: Sequence[Any], *, timeout: float = 120.0):
        """One remote command; a node that cannot be reached fails the current step."""
        conn = self.conn_for(host.name)
        try:
            return conn.exec(conn.become_command(quoting.join_argv(argv), self.become),
                             timeout=timeout)
        except ConnectError as err:
            raise StepFailed(self.step, host.name, f"unreachable: {err}") from None

    def systemctl(self, host: Host, step: str, *args: str, timeout: float = 600.0) -> None:
        self.step = step
        result = self.run(host, ["systemctl", *args], timeout=timeout)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
            raise StepFailed(step, host.name, f"systemctl {' '.join(args)}: {detail}")

    def unit_status(self, host: Host, unit: str) -> dict[str, Any]:
        result = self.run(host, ["systemctl", "show", "-p", "ActiveState", "-p", "SubState",
                                 "-p", "NRestarts", "-p", "MainPID", "-p", "Result", unit],
                          timeout=30)
        if not result.ok:
            # No answer is not "still starting": the node may be going down.
            detail = "timed out" if result.timed_out else \
                (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
            raise StepFailed(self.step, host.name, f"cannot read {unit}: {detail}")
        values = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        return {"active": values.get("ActiveState", "unknown"),
                "sub": values.get("SubState", ""), "result": values.get("Result", ""),
                "restarts": int(values.get("NRestarts", "0") or 0),
                "main_pid": int(values.get("MainPID", "0") or 0)}

    def journal_tail(self, host: Host, unit: str, lines: int = 40) -> str:
        """The most telling recent log line of a unit (an error if there is one)."""
        try:
            result = self.run(host, ["journalctl", "-u", unit, "-n", str(lines), "--no-pager",
                                     "-o", "cat"], timeout=30)
        except StepFailed:
            return ""
        text = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        for line in reversed(text):
            if " WARNING " in line or line.startswith(("File ", "^")):
                continue
            if "Error" in line or "ERROR" in line or "Exception" in line:
                return line[:300]
        return text[-1][:300] if text else ""

    def listening(self, host: Host, port: int) -> bool:
        result = self.run(host, ["ss", "-Hltn", f"sport = :{port}"], timeout=30)
        return result.ok and bool(result.stdout.strip())

    def parallel(self, hosts: Sequence[Host], fn: Callable[[Host], Any]) -> None:
        """Run fn on every host at once; re-raise the first failure in rank order."""
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
            futures = [(host, pool.submit(fn, host)) for host in hosts]
            errors = []
            for host, future in futures:
                try:
                    future.result()
                except StepFailed as err:
                    errors.append(err)
            if errors:
                raise errors[0]

    # -- the steps ---------------------------------------------------------------------

    def stop_engines(self, units: dict[str, tuple[str, ...]], step: str = "stop engines"
                     ) -> None:
        """Followers first, then the head (a head waiting on dead followers stops fast).
        The head's gang supervisor stops first: it must not restart ranks a deploy stops
        (the release's side units start it again once the release serves)."""
        self.step = step
        self.run(self.inv.head, ["systemctl", "stop", SUPERVISOR_UNIT], timeout=60)
        for host in reversed(self.inv.hosts):
            for unit in reversed(units.get(host.name, ())):
                self.log.note(f"stopping {unit} on {host.name}", node=host.name)
                self.systemctl(host, step, "stop", unit)

    def install(self, target: SwitchTarget, step: str = "install units") -> dict[str, list[str]]:
        changed: dict[str, list[str]] = {}
        self.step = step

        def one(host: Host) -> None:
            try:
                changed[host.name] = self.ops_for(host).install_units(
                    target.release_id, target.engine_units[host.name]
                    + target.side_units[host.name])
            except AscendctlError as err:
                raise StepFailed(step, host.name, str(err)) from None

        self.parallel(self.inv.hosts, one)
        return changed

    def coordination_port(self) -> Optional[int]:
        s = self.inv.serving
        return {"mp": s.master_port if len(self.inv.hosts) > 1 else None,
                "dp": s.data_parallel_rpc_port if len(self.inv.hosts) > 1 else None,
                "ray": s.ray_port}[s.mode]

    def start_in_rank_order(self, target: SwitchTarget) -> dict[str, dict[str, Any]]:
        """Start each rank and wait for it before the next; returns the units' states."""
        started: dict[str, dict[str, Any]] = {}
        for host in self.inv.hosts:
            for unit in target.engine_units[host.name]:
                step = f"start rank {host.rank} ({unit})"
                self.log.note(f"starting {unit} on {host.name} (rank {host.rank})",
                              node=host.name)
                self.systemctl(host, step, "start", unit)
                started[f"{host.name}/{unit}"] = self.wait_started(host, unit, step)
        return started

    def wait_started(self, host: Host, unit: str, step: str) -> dict[str, Any]:
        """The rank's unit is up and stays up (or the head already listens on the
        coordination port). Not more: the head blocks on its peers before it finishes
        loading, so waiting for it to load would only push the followers past
        HCCL_CONNECT_TIMEOUT (the readiness gate proves the rest)."""
        self.step = step
        port = self.coordination_port() if host.is_head else None
        deadline = time.monotonic() + RANK_START_WAIT_S
        active_since: Optional[float] = None
        initial_restarts: Optional[int] = None
        first_pid = 0
        while True:
            state = self.unit_status(host, unit)
            if initial_restarts is None:
                initial_restarts = state["restarts"]
            if state["active"] in ("failed", "inactive") or \
                    state["restarts"] > initial_restarts or state["sub"] == "auto-restart":
                raise StepFailed(step, host.name, f"{unit} {state['active']}"
                                 f"/{state['sub']}: {self.journal_tail(host, unit)}")
            if first_pid and state["main_pid"] != first_pid:
                raise StepFailed(step, host.name, f"{unit} was restarted (PID {first_pid} → "
                                 f"{state['main_pid']}): the node rebooted or the engine died")
            if state["active"] == "active":
                first_pid = first_pid or state["main_pid"]
                active_since = active_since or time.monotonic()
                if time.monotonic() - active_since >= SETTLE_S or \
                        (port is not None and self.listening(host, port)):
                    return state
            if time.monotonic() > deadline:
                raise StepFailed(step, host.name, f"{unit} never became active within "
                                 f"{RANK_START_WAIT_S}s: {self.journal_tail(host, unit)}")
            time.sleep(POLL_S)

    def start_side_units(self, target: SwitchTarget, changed: dict[str, list[str]]) -> None:
        self.step = "start exporter and watchdog"

        def one(host: Host) -> None:
            for unit in target.side_units[host.name]:
                verb = "restart" if unit in changed.get(host.name, ()) else "start"
                self.systemctl(host, f"{verb} {unit}", verb, unit)
                self.systemctl(host, f"enable {unit}", "enable", "--quiet", unit)

        self.parallel(self.inv.hosts, one)

    def wait_ready(self, target: SwitchTarget, baseline: dict[str, dict[str, Any]],
                   step: str = "readiness") -> dict[str, Any]:
        """Every engine unit stays up (no restart) and the head really serves."""
        self.step = step
        head = self.inv.head
        deadline = time.monotonic() + self.inv.serving.startup_timeout
        release = release_dir(self.inv.deploy.root, target.release_id)
        model = self.inv.model.served_name or f"{release}/model"
        probe = ["env", f"PYTHONPATH={release}/runtime", self.inv.deploy.python, "-m",
                 "ascendctl_runtime.probe", "ready", "--port", str(self.inv.serving.port),
                 "--model", model, "--stream", "--timeout", str(PROBE_TIMEOUT_S)]
        if self.inv.serving.api_key is not None:
            probe += ["--secrets", f"{release}/secrets.env"]
        last = "no answer yet"
        while True:
            self.check_still_up(target, baseline, step)
            result = self.run(head, probe, timeout=PROBE_TIMEOUT_S * 3)
            answer = _last_json(result.stdout)
            if answer and answer.get("ready"):
                self.log.note(f"{head.name} serves {model}: "
                              f"{answer.get('completion', '')!r}", node=head.name)
                return answer
            last = (answer or {}).get("error") or result.stderr.strip()[-300:] or last
            if time.monotonic() > deadline:
                raise StepFailed(step, head.name, f"not ready within "
                                 f"{self.inv.serving.startup_timeout}s: {last}")
            time.sleep(POLL_S * 2)

    def check_still_up(self, target: SwitchTarget, baseline: dict[str, dict[str, Any]],
                       step: str) -> None:
        def one(host: Host) -> None:
            for unit in target.engine_units[host.name]:
                state = self.unit_status(host, unit)
                before = baseline.get(f"{host.name}/{unit}", {})
                if state["active"] != "active" or \
                        state["restarts"] > before.get("restarts", 0) or \
                        (before.get("main_pid") and state["main_pid"] != before["main_pid"]):
                    raise StepFailed(step, host.name, f"{unit} went {state['active']}/"
                                     f"{state['sub']} (restarts {state['restarts']}): "
                                     f"{self.journal_tail(host, unit)}")

        self.parallel(self.inv.hosts, one)

    def wait_reachable(self, budget_s: float, step: str = "wait for the nodes") -> None:
        """Every node answers again (a node rebooted or powered back on during the deploy),
        within budget_s; connections are re-opened as needed."""
        deadline = time.monotonic() + budget_s

        def one(host: Host) -> None:
            conn = self.conn_for(host.name)
            fresh = conn.failure is None and conn.is_open
            while True:
                try:
                    if not fresh:
                        conn.reconnect()
                    if conn.exec("true", timeout=30).ok:
                        return
                except ConnectError as err:
                    fresh = False
                    if time.monotonic() > deadline:
                        raise StepFailed(step, host.name, f"unreachable for "
                                         f"{budget_s:.0f}s: {err}") from None
                    self.log.note(f"{host.name} unreachable ({err}); waiting", node=host.name)
                time.sleep(POLL_S * 2)

        self.parallel(self.inv.hosts, one)

    # -- whole transitions -------------------------------------------------------------

    def bring_up(self, target: SwitchTarget) -> dict[str, Any]:
        changed = self.install(target)
        baseline = self.start_in_rank_order(target)
        answer = self.wait_ready(target, baseline)
        self.start_side_units(target, changed)
        return answer


def _last_json(text: str) -> Optional[dict[str, Any]]:
    import json

    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
