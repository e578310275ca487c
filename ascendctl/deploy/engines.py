"""The engine units of one node: systemctl, their state, their journal, readiness probes.

Used by the switch steps (ascendctl/deploy/playbook_modules/) and by the restore. A node
that cannot be reached fails the step under way (StepFailed names the step and the node)
instead of surfacing as a transport error of some other host.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ascendctl_runtime.gangrules import RANK_START_WAIT_S, rank_is_up

from ascendctl.deploy.nodestate import UnitState
from ascendctl.errors import AscendctlError
from ascendctl.render.files import release_dir
from ascendctl.render.health import coordination_port
from ascendctl.transport.errors import ConnectError
from ascendctl.inventory.pd import entry_port

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.transport.remote import Remote
    from ascendctl.transport.results import CommandResult

POLL_S = 2.0
PROBE_TIMEOUT_S = 120.0  # one readiness request (a cold first completion can be slow)


class StepFailed(AscendctlError):
    """A switch step failed on a node; names both."""

    def __init__(self, step: str, node: str, reason: str):
        super().__init__(f"{step} failed on {node}: {reason}")
        self.step, self.node, self.reason = step, node, reason


@dataclass(frozen=True)
class ProbeAnswer:
    """What `ascendctl_runtime.probe ready` answered on the head."""

    ready: bool
    step: str = ""                 # models | completion | stream | done
    error: Optional[str] = None
    completion: Optional[str] = None
    seconds: Optional[float] = None

    @classmethod
    def from_output(cls, stdout: str, stderr: str) -> "ProbeAnswer":
        for line in reversed(stdout.strip().splitlines()):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                seconds = value.get("seconds")
                return cls(ready=bool(value.get("ready")), step=str(value.get("step") or ""),
                           error=None if value.get("error") is None else str(value["error"]),
                           completion=None if value.get("completion") is None
                           else str(value["completion"]),
                           seconds=float(seconds) if isinstance(seconds, (int, float))
                           else None)
        return cls(ready=False, error=stderr.strip()[-300:] or "no answer")


class EngineControl:
    """One node's engine units, for one step (its name goes into every failure)."""

    def __init__(self, inv: "Inventory", host: "Host", conn: "Remote", *, step: str,
                 cancel: threading.Event, become: Optional[bool] = None):
        self.inv, self.host, self.conn = inv, host, conn
        self.step, self.cancel, self.become = step, cancel, become

    def fail(self, reason: str) -> StepFailed:
        return StepFailed(self.step, self.host.name, reason)

    def run(self, argv: Sequence[Any], *, timeout: float = 120.0) -> "CommandResult":
        try:
            return self.conn.run(argv, timeout=timeout, become=self.become)
        except ConnectError as err:
            raise self.fail(f"unreachable: {err.reason}") from None

    def systemctl(self, *args: str, timeout: float = 600.0) -> None:
        result = self.run(["systemctl", *args], timeout=timeout)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
            raise self.fail(f"systemctl {' '.join(args)}: {detail}")

    def unit_status(self, unit: str) -> UnitState:
        result = self.run(["systemctl", "show", "-p", "ActiveState", "-p", "SubState",
                           "-p", "NRestarts", "-p", "MainPID", "-p", "Result", unit],
                          timeout=30)
        if not result.ok:
            # No answer is not "still starting": the node may be going down.
            detail = "timed out" if result.timed_out else \
                (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
            raise self.fail(f"cannot read {unit}: {detail}")
        values = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        return UnitState.from_json({
            "load": "loaded", "active": values.get("ActiveState", "unknown"),
            "sub": values.get("SubState", ""), "result": values.get("Result", ""),
            "restarts": values.get("NRestarts", "0"), "main_pid": values.get("MainPID", "0")})

    def journal_tail(self, unit: str, lines: int = 40) -> str:
        """The most telling recent log line of a unit (an error if there is one)."""
        try:
            result = self.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager",
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

    def listening(self, port: int) -> bool:
        result = self.run(["ss", "-Hltn", f"sport = :{port}"], timeout=30)
        return result.ok and bool(result.stdout.strip())

    def sleep(self, seconds: float) -> None:
        if self.cancel.wait(seconds):
            raise self.fail("interrupted")

    # -- starting and watching ---------------------------------------------------------

    def start(self, unit: str) -> UnitState:
        self.systemctl("start", unit)
        return self.wait_started(unit)

    def wait_started(self, unit: str) -> UnitState:
        """The rank's unit is up and stays up (or the head already listens on the
        coordination port). Not more: the head blocks on its peers before it finishes
        loading, so waiting for it to load would only push the followers past
        HCCL_CONNECT_TIMEOUT (the readiness gate proves the rest)."""
        port = coordination_port(self.inv) if self.host.is_head else None
        deadline = time.monotonic() + RANK_START_WAIT_S
        active_since: Optional[float] = None
        initial_restarts: Optional[int] = None
        first_pid = 0
        while True:
            state = self.unit_status(unit)
            if initial_restarts is None:
                initial_restarts = state.restarts
            if state.active in ("failed", "inactive") or state.restarts > initial_restarts \
                    or state.sub == "auto-restart":
                raise self.fail(f"{unit} {state.active}/{state.sub}: "
                                f"{self.journal_tail(unit)}")
            if first_pid and state.main_pid != first_pid:
                raise self.fail(f"{unit} was restarted (PID {first_pid} → {state.main_pid}): "
                                "the node rebooted or the engine died")
            if state.running:
                first_pid = first_pid or state.main_pid
                active_since = active_since or time.monotonic()
                if rank_is_up(time.monotonic() - active_since,
                              lambda: port is not None and self.listening(port)):
                    return state
            if time.monotonic() > deadline:
                raise self.fail(f"{unit} never became active within {RANK_START_WAIT_S}s: "
                                f"{self.journal_tail(unit)}")
            self.sleep(POLL_S)

    def check_still_up(self, unit: str, baseline: Optional[UnitState]) -> None:
        """The unit runs the same process it ran when it was started (no restart)."""
        state = self.unit_status(unit)
        if not state.running or (baseline is not None and (
                state.restarts > baseline.restarts
                or (baseline.main_pid and state.main_pid != baseline.main_pid))):
            raise self.fail(f"{unit} went {state.active}/{state.sub} (restarts "
                            f"{state.restarts}): {self.journal_tail(unit)}")

    def metrics(self, release_id: str) -> dict[str, float]:
        """The engine's /metrics on this node (the head), read on the node: the names of
        ascendctl_runtime.probe's METRICS_OF_INTEREST. Raises StepFailed when it does not
        answer."""
        release = release_dir(self.inv.deploy.root, release_id)
        argv = ["env", f"PYTHONPATH={release}/runtime", self.inv.deploy.python, "-m",
                "ascendctl_runtime.probe", "metrics", "--port", str(self.inv.serving.port),
                "--timeout", "10"]
        result = self.run(argv, timeout=60)
        answer = None
        for line in reversed(result.stdout.strip().splitlines()):
            try:
                answer = json.loads(line)
                break
            except ValueError:
                continue
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error") if isinstance(answer, dict) else None
            raise self.fail(f"/metrics: {error or result.stderr.strip()[-200:] or 'no answer'}")
        return {str(k): float(v) for k, v in (answer.get("metrics") or {}).items()}

    def probe(self, release_id: str, *, stream: bool) -> ProbeAnswer:
        """Ask the engine on this node (the head) whether it serves: /v1/models lists the
        model and a completion answers (and, with stream, a streamed one)."""
        release = release_dir(self.inv.deploy.root, release_id)
        model = self.inv.model.served_name or f"{release}/model"
        argv = ["env", f"PYTHONPATH={release}/runtime", self.inv.deploy.python, "-m",
                "ascendctl_runtime.probe", "ready", "--port", str(entry_port(self.inv)),
                "--model", model, "--timeout", str(PROBE_TIMEOUT_S)]
        if stream:
            argv.append("--stream")
        if self.inv.serving.api_key is not None:
            argv += ["--secrets", f"{release}/secrets.env"]
        result = self.run(argv, timeout=PROBE_TIMEOUT_S * 3)
        return ProbeAnswer.from_output(result.stdout, result.stderr)
