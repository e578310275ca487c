"""The node agent: publishes this rank's engine state and follows the supervisor's plan.

It runs inside the node's exporter process (`ascendctl_runtime.exporter --agent
<release>/agent.json`), so one HTTP port per node serves Prometheus (/metrics), the
supervisor (/health/state) and, on the head, the plan (/health/plan). It never takes a
command from the network: it fetches the head's signed plan (ascendctl_runtime.gangplan)
and does its own part — stop this node's engine units, or start them when the plan's
start order reaches them — at most once per plan generation. Without a valid, fresh plan
it does nothing at all (during a deploy the supervisor is stopped or held).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from ascendctl_runtime import engine_state as es
from ascendctl_runtime import gangplan, healthstore, layout, maintenance
from ascendctl_runtime.contract import AgentConfig
from ascendctl_runtime.nodeutil import repeat

NpuTable = Optional[list[tuple[int, int, str, Optional[int]]]]
SYSTEMCTL_TIMEOUT_S = 120.0


@dataclass
class AgentMemory:
    """Kept in <root>/health/agent.json across agent restarts."""

    units: dict[str, es.UnitMemory] = field(default_factory=dict)
    generation_seen: int = 0
    stopped_for: Optional[int] = None
    started_gen: Optional[int] = None
    started_steps: list[int] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)      # unit → starts by the agent
    starts_release: str = ""
    last_action: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["units"] = {u: asdict(m) for u, m in self.units.items()}
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "AgentMemory":
        if not isinstance(data, dict):
            return cls()
        memory = cls()
        memory.units = {u: es.UnitMemory.from_dict(m) for u, m in
                        (data.get("units") or {}).items()}
        for key in ("generation_seen", "stopped_for", "started_gen", "started_steps",
                    "starts", "starts_release", "last_action"):
            if key in data:
                setattr(memory, key, data[key])
        return memory


class Systemd:
    """The few systemctl calls the agent makes (replaced in unit tests)."""

    def run(self, *args: str) -> tuple[int, str]:
        try:
            done = subprocess.run(["systemctl", *args], capture_output=True, text=True,
                                  timeout=SYSTEMCTL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as err:
            return 1, str(err)
        return done.returncode, (done.stderr or done.stdout).strip()

    def show(self, units: list[str]) -> dict[str, es.UnitShow]:
        return es.read_units(units)

    def journal(self, unit: str) -> Optional[str]:
        return es.journal_error(unit)


def read_npu_table() -> tuple[NpuTable, str]:
    """npu-smi's process table as (npu, pid, name, MB) rows, or None and why."""
    from ascendctl_runtime import npu

    info, error = npu.read_npu_info()
    if info is None:
        return None, error
    return [(p.npu_id, p.pid, p.name, p.memory_mb) for p in info.processes], ""


def fetch_plan(url: str, timeout: float = 3.0) -> Optional[Any]:
    """The signed plan document from the head, or None when it publishes none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read(1_000_000))
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


class Agent:
    def __init__(self, config: AgentConfig, *, systemd: Optional[Systemd] = None,
                 npu_table: Callable[[], tuple[NpuTable, str]] = read_npu_table,
                 plan_source: Optional[Callable[[], Optional[Any]]] = None,
                 clock: Callable[[], float] = time.time,
                 boot: Callable[[], str] = es.boot_id,
                 token: Optional[bytes] = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.systemd = systemd or Systemd()
        self.npu_table = npu_table
        self.plan_source = plan_source or (lambda: fetch_plan(config.plan_url))
        self.clock = clock
        self.sleep = sleep
        self.boot_id = boot()
        self.token = token if token is not None else gangplan.read_token(config.secrets_file)
        self.lock = threading.RLock()
        self.state_path = healthstore.health_path(config.root, layout.AGENT_STATE)
        self.memory = AgentMemory.from_dict(healthstore.read_json(self.state_path))
        if self.memory.starts_release != config.release:
            self.memory.starts, self.memory.starts_release = {}, config.release
        self.plan_view = gangplan.PlanView()
        self._npu: tuple[float, NpuTable, str] = (float("-inf"), None, "not read yet")
        self._journal: dict[tuple[str, Optional[float]], Optional[str]] = {}
        self.started_at = clock()
        self.faults: Any = None         # the fault monitor, when the release has faults.json

    # -- observing ---------------------------------------------------------------------

    def npu(self, fresh: bool = False) -> tuple[NpuTable, str]:
        with self.lock:
            read_at, table, error = self._npu
            if fresh or self.clock() - read_at >= self.config.npu_cache_s:
                table, error = self.npu_table()
                self._npu = (self.clock(), table, error)
            return table, error

    def unit_states(self) -> tuple[dict[str, es.UnitShow], dict[str, es.UnitState]]:
        """systemd's view, classified with (and folded into) the agent's memory."""
        with self.lock:
            shows = self.systemd.show(self.config.units)
            now = self.clock()
            states, changed = {}, False
            for unit in self.config.units:
                memory = self.memory.units.get(unit, es.UnitMemory())
                state = es.classify(shows[unit], memory, self.boot_id, now)
                new_memory = es.remember(memory, state, self.boot_id, now)
                if new_memory != memory:
                    self.memory.units[unit] = new_memory
                    changed = True
                if state.state == es.CRASHED:
                    state.journal = self._crash_line(unit, state.since)
                states[unit] = state
            if changed:
                self.save()
            return shows, states

    def _crash_line(self, unit: str, since: Optional[float]) -> Optional[str]:
        key = (unit, since)
        if key not in self._journal:
            self._journal = {k: v for k, v in self._journal.items() if k[0] != unit}
            self._journal[key] = es.redact(self.systemd.journal(unit),
                                           es.secret_values(self.config.secrets_file))
        return self._journal[key]

    def restart_request(self) -> Optional[dict[str, Any]]:
        return healthstore.read_json(
            healthstore.health_path(self.config.root, layout.RESTART_REQUEST))

    def snapshot(self) -> dict[str, Any]:
        """This rank's state as the supervisor and `status` read it."""
        shows, states = self.unit_states()
        table, error = self.npu(fresh=self.plan_view.action == "stop")
        holders = es.npu_holders(table, error, es.engine_pids(shows), self.config.units)
        return {
            "cluster": self.config.cluster, "node": self.config.node, "rank": self.config.rank,
            "release": self.config.release, "boot_id": self.boot_id, "time": self.clock(),
            "agent_started": self.started_at,
            "units": {unit: state.to_dict() for unit, state in states.items()},
            "listening": es.listening(self.config.coordination_port)
            if self.config.is_head else None,
            "npu": holders.to_dict(),
            "plan": asdict(self.plan_view),
            "generation_seen": self.memory.generation_seen,
            "stopped_for": self.memory.stopped_for,
            "started_gen": self.memory.started_gen,
            "started_steps": list(self.memory.started_steps),
            "starts": dict(self.memory.starts),
            "last_action": self.memory.last_action,
            "request": self.restart_request(),
            "maintenance": self.maintenance(),
            "faults": self.faults.view() if self.faults is not None else None,
        }

    def maintenance(self) -> Optional[dict[str, Any]]:
        record = maintenance.read(self.config.root)
        return record.to_dict() if record else None

    # -- acting ------------------------------------------------------------------------

    def current_plan(self) -> Optional[gangplan.Plan]:
        """The head's plan if it is valid for this node now (else None, reason noted)."""
        view = gangplan.PlanView(fetched_at=self.clock())
        try:
            document = self.plan_source()
        except (OSError, ValueError, urllib.error.URLError) as err:
            view.error = f"cannot fetch the plan: {getattr(err, 'reason', err)}"
            self.plan_view = view
            return None
        if document is None:
            self.plan_view = view
            return None
        if not self.token:
            view.error = f"no {gangplan.TOKEN_KEY} in {self.config.secrets_file}"
            self.plan_view = view
            return None
        try:
            plan = gangplan.verify(document, self.token)
        except gangplan.PlanError as err:
            view.error = str(err)
            self.plan_view = view
            return None
        view.generation, view.action = plan.generation, plan.action
        if plan.cluster != self.config.cluster or plan.release != self.config.release:
            view.error = (f"plan for {plan.cluster}/{plan.release}, this node runs "
                          f"{self.config.cluster}/{self.config.release}")
            self.plan_view = view
            return None
        if plan.generation < self.memory.generation_seen:
            view.error = f"stale generation {plan.generation} < {self.memory.generation_seen}"
            self.plan_view = view
            return None
        self.plan_view = view
        return plan

    def step(self) -> Optional[str]:
        """Fetch the plan and do this node's part; returns what was done, if anything."""
        plan = self.current_plan()
        if plan is None:
            return None
        # Not under self.lock: /health/state must answer while a stop takes its time.
        if plan.generation > self.memory.generation_seen:
            with self.lock:
                self.memory.generation_seen = plan.generation
                self.save()
        self.clear_handled_request(plan)
        if plan.action == "stop" and self.memory.stopped_for != plan.generation:
            return self.stop(plan.generation)
        if plan.action == "start":
            return self.start(plan)
        return None

    def clear_handled_request(self, plan: gangplan.Plan) -> None:
        request = self.restart_request()
        if request and str(request.get("id")) in plan.handled_requests:
            path = healthstore.health_path(self.config.root, layout.RESTART_REQUEST)
            try:
                os.unlink(path)
            except OSError:
                pass

    def stop(self, generation: int) -> str:
        """Stop every engine unit of this node: SIGTERM, SIGKILL after the grace period
        (the group restarts anyway; a hung rank must not hold it up)."""
        units = list(reversed(self.config.units))
        for unit in units:
            self.systemd.run("stop", "--no-block", unit)
        deadline = self.clock() + self.config.stop_grace_s
        killed = False
        while True:
            shows = self.systemd.show(units)
            busy = [u for u in units if shows[u].active in ("active", "activating",
                                                             "deactivating", "reloading")]
            if not busy:
                break
            if self.clock() > deadline:
                if killed:
                    return self._record("stop", generation, ok=False,
                                        detail=f"{', '.join(busy)} still {shows[busy[0]].active} "
                                               "after SIGKILL")
                for unit in busy:
                    self.systemd.run("kill", "--signal=SIGKILL", unit)
                killed = True
                deadline = self.clock() + self.config.stop_grace_s
            self.sleep(0.5)
        with self.lock:
            for unit in units:
                self.systemd.run("reset-failed", unit)
                memory = self.memory.units.get(unit, es.UnitMemory(boot_id=self.boot_id))
                self.memory.units[unit] = es.UnitMemory(boot_id=self.boot_id,
                                                        seen_running=memory.seen_running,
                                                        stopped_by_plan=generation)
            self.memory.stopped_for = generation
        return self._record("stop", generation, ok=True,
                            detail="SIGKILL after the grace period" if killed else "stopped")

    def start(self, plan: gangplan.Plan) -> Optional[str]:
        if self.memory.started_gen != plan.generation:
            self.memory.started_gen, self.memory.started_steps = plan.generation, []
        done = []
        for index, unit in plan.steps_for(self.config.node):
            if index in self.memory.started_steps:
                continue
            with self.lock:
                self.systemd.run("reset-failed", unit)
                self.memory.units[unit] = es.UnitMemory(boot_id=self.boot_id)
                self.memory.started_steps.append(index)
                self.memory.starts[unit] = self.memory.starts.get(unit, 0) + 1
                self.save()
            code, output = self.systemd.run("start", unit)
            if code != 0:
                # the unit's own state (failed) tells the supervisor; the start is not retried
                done.append(f"{unit} failed to start: {output[-200:]}")
            else:
                done.append(f"started {unit}")
        if not done:
            return None
        return self._record("start", plan.generation, ok=True, detail="; ".join(done))

    def _record(self, action: str, generation: int, *, ok: bool, detail: str) -> str:
        with self.lock:
            self.memory.last_action = {"action": action, "generation": generation, "ok": ok,
                                       "detail": detail, "time": self.clock()}
            self.save()
        message = f"generation {generation}: {action}: {detail}"
        log(message)
        return message

    def save(self) -> None:
        with self.lock:
            healthstore.write_json(self.state_path, self.memory.to_dict())

    def disable_boot_start(self) -> None:
        """Engine units must never start on their own at boot (the supervisor starts the
        group in rank order): drop enablement links an older release may have left."""
        for unit in self.config.units:
            self.systemd.run("disable", "--quiet", unit)

    def run_forever(self, stop: threading.Event) -> None:
        log(f"agent for {self.config.node} (rank {self.config.rank}, release "
            f"{self.config.release}): following {self.config.plan_url}")
        self.disable_boot_start()
        repeat(stop, self.config.interval_s, self.step, "agent")


def log(message: str) -> None:
    import sys

    print(f"ascendctl-agent: {message}", file=sys.stderr, flush=True)
