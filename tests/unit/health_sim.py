"""An in-process serving group for the gang-recovery tests: the real Agent of every node
and the real Supervisor, talking through the real signed plan file, with systemd, the
clock, npu-smi and the deep probe replaced by small fakes that behave like the lab did.

Only what a node's hardware/OS would do is simulated: a unit starts (or fails to, as a
rank with a bad flag does), crashes, is stopped; the probe answers when every engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ascendctl_runtime import engine_state as es
from ascendctl_runtime.agent import Agent, AgentConfig
from ascendctl_runtime.contract import RankSpec, SupervisorConfig
from ascendctl_runtime.supervisor import Supervisor

TOKEN = b"test-token-0123456789"
UNIT = "ascendctl-engine.service"


class Clock:
    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start

    def __call__(self) -> float:
        self.now += 0.001          # every look at the clock takes a moment (no busy loops)
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeUnit:
    active: str = "inactive"
    result: str = "success"
    exit_code: str = ""
    exit_status: int = 0
    pid: int = 0
    active_since: Optional[float] = None
    fails_at_start: bool = False        # a rank with a bad engine flag
    stubborn: bool = False              # ignores SIGTERM (a hung rank)
    loaded: bool = True


class FakeSystemd:
    """systemctl as the agent uses it, on one node's units."""

    def __init__(self, clock: Clock, units: list[str]):
        self.clock = clock
        self.units = {u: FakeUnit() for u in units}
        self.calls: list[tuple[str, ...]] = []
        self.next_pid = 1000

    def run(self, *args: str) -> tuple[int, str]:
        self.calls.append(args)
        verb, unit = args[0], args[-1]
        state = self.units.get(unit)
        if state is None:
            return 5, f"Unit {unit} not loaded."
        if verb == "start":
            if state.active == "active":
                return 0, ""
            if state.fails_at_start:
                state.active, state.result = "failed", "exit-code"
                state.exit_code, state.exit_status, state.pid = "exited", 2, 0
                return 0, ""
            self.next_pid += 1
            state.active, state.result, state.pid = "active", "success", self.next_pid
            state.exit_code, state.exit_status = "", 0
            state.active_since = self.clock.now
        elif verb == "stop":
            if state.active == "active" and state.stubborn:
                state.active = "deactivating"
            elif state.active in ("active", "deactivating"):
                state.active, state.pid = "inactive", 0
        elif verb == "kill":
            if state.active in ("active", "deactivating"):
                state.active, state.result, state.pid = "failed", "signal", 0
                state.exit_code, state.exit_status = "killed", 9
        elif verb == "reset-failed":
            if state.active == "failed":
                state.active, state.result = "inactive", "success"
        return 0, ""

    def journal(self, unit: str) -> Optional[str]:
        state = self.units[unit]
        if state.fails_at_start:
            return "vllm: error: unrecognized arguments: --no-such-engine-flag"
        return f"ascendctl-launcher: rank ?: the engine was killed by signal {state.exit_status - 128}"

    def show(self, units: list[str]) -> dict[str, es.UnitShow]:
        shows = {}
        for unit in units:
            state = self.units.get(unit)
            if state is None:
                shows[unit] = es.UnitShow(unit=unit, load="not-found", active="inactive")
                continue
            shows[unit] = es.UnitShow(
                unit=unit, load="loaded", active=state.active,
                sub="running" if state.active == "active" else "dead",
                result=state.result, main_pid=state.pid, exit_code=state.exit_code,
                exit_status=state.exit_status,
                active_since=state.active_since if state.active == "active" else None)
        return shows

    # -- faults ---------------------------------------------------------------------

    def crash(self, unit: str = UNIT, signal: int = 9) -> None:
        state = self.units[unit]
        state.active, state.result, state.pid = "failed", "exit-code", 0
        state.exit_code, state.exit_status = "exited", 128 + signal


@dataclass
class Node:
    name: str
    rank: int
    systemd: FakeSystemd
    agent: Agent
    reachable: bool = True
    npu_table: list[tuple[int, int, str, Optional[int]]] = field(default_factory=list)
    boot: str = "boot-1"


class Cluster:
    def __init__(self, root: Path, nodes: int = 2, **policy: Any):
        self.clock = Clock()
        self.root = root
        self.probe_answers: list[dict[str, Any]] = []
        self.tokens: Optional[float] = None
        self.in_flight_answers: list[Optional[float]] = []   # the head's running + waiting
        self.gateway: Optional[bool] = None         # the gateway has the group out (None: none)
        self.events: list[dict[str, Any]] = []
        self.nodes: list[Node] = []
        for rank in range(nodes):
            self.add_node(f"node{rank}", rank)
        config = SupervisorConfig(
            cluster="c", release="r-1", root=str(root / "node0"),
            ranks=[RankSpec(node=n.name, rank=n.rank, state_url="-", units=(UNIT,))
                   for n in self.nodes],
            steps=[(n.name, UNIT) for n in self.nodes], probe_port=8000, probe_model="tiny",
            head_node="node0", **{"probe_interval_s": 5.0, "probe_timeout_s": 10.0,
                                  "probe_failure_s": 30.0, "startup_timeout_s": 300.0,
                                  "rank_start_wait_s": 60.0, "settle_s": 5.0,
                                  "max_attempts": 3, "backoff_s": 10.0, "backoff_max_s": 300.0,
                                  "stop_timeout_s": 60.0, "npu_free_timeout_s": 120.0,
                                  "stable_s": 600.0, **policy})
        self.supervisor = Supervisor(config, self, clock=self.clock, token=TOKEN,
                                     emit=self.events.append)
        for node in self.nodes:
            node.systemd.run("start", UNIT)       # the deploy started every rank
        self.step()

    def add_node(self, name: str, rank: int) -> None:
        systemd = FakeSystemd(self.clock, [UNIT])
        node_root = self.root / name
        node_root.mkdir(parents=True, exist_ok=True)
        plan_file = self.root / "node0" / "health" / "plan.json"
        config = AgentConfig(cluster="c", node=name, rank=rank, release="r-1",
                             root=str(node_root), units=[UNIT], plan_url="-",
                             is_head=rank == 0, stop_grace_s=15.0)
        holder: dict[str, Node] = {}

        def plan_source():
            import json

            if not plan_file.exists():
                return None
            return json.loads(plan_file.read_text())

        def make_agent() -> Agent:
            return Agent(config, systemd=systemd,
                         npu_table=lambda: (holder["n"].npu_table, ""),
                         plan_source=plan_source, clock=self.clock,
                         boot=lambda: holder["n"].boot, token=TOKEN, sleep=self.clock.advance)

        holder["n"] = Node(name=name, rank=rank, systemd=systemd, agent=None)  # type: ignore
        holder["n"].agent = make_agent()
        holder["n"].make_agent = make_agent  # type: ignore[attr-defined]
        self.nodes.append(holder["n"])

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # -- the supervisor's I/O (the Io protocol) --------------------------------------

    def rank_states(self) -> dict[str, Optional[dict[str, Any]]]:
        return {n.name: n.agent.snapshot() if n.reachable else None for n in self.nodes}

    def probe(self) -> dict[str, Any]:
        if self.probe_answers:
            return dict(self.probe_answers.pop(0))
        serving = all(n.reachable and n.systemd.units[UNIT].active == "active"
                      for n in self.nodes)
        if serving:
            return {"ok": True, "seconds": 0.05, "error": None, "status": 200}
        return {"ok": False, "seconds": 10.0, "error": "completion: no answer within 10 s",
                "status": None}

    def generation_tokens(self) -> Optional[float]:
        return self.tokens

    def in_flight(self) -> Optional[float]:
        return self.in_flight_answers.pop(0) if self.in_flight_answers else 0.0

    def gateway_out(self) -> Optional[bool]:
        return self.gateway

    # -- driving ---------------------------------------------------------------------

    def step(self, seconds: float = 2.0) -> None:
        """One supervisor tick, then every reachable agent's step, then time passes."""
        self.supervisor.tick()
        for node in self.nodes:
            if node.reachable:
                node.agent.step()
        self.clock.advance(seconds)

    def run_until(self, predicate, limit: int = 400, seconds: float = 2.0) -> int:
        for ticks in range(limit):
            if predicate():
                return ticks
            self.step(seconds)
        raise AssertionError(f"not reached in {limit} ticks; phase "
                             f"{self.supervisor.state.phase}, events "
                             f"{[e['stage'] for e in self.events]}")

    @property
    def phase(self) -> str:
        return self.supervisor.state.phase

    def stages(self) -> list[str]:
        return [e["stage"] for e in self.events]

    def serving(self) -> bool:
        return self.phase == "serving" and all(
            n.systemd.units[UNIT].active == "active" for n in self.nodes)

    def start_times(self) -> dict[str, list[float]]:
        """When each node's engine was started (from the fake systemd's calls)."""
        return {n.name: [c for c in n.systemd.calls if c[0] == "start"] for n in self.nodes}

    def power_off(self, name: str) -> None:
        node = self.node(name)
        node.reachable = False
        for unit in node.systemd.units.values():
            unit.active, unit.result, unit.pid, unit.active_since = "inactive", "success", 0, None

    def power_on(self, name: str) -> None:
        """A new boot: units are inactive (never started), the agent starts afresh and
        reads its memory back from disk."""
        node = self.node(name)
        node.boot = node.boot + "+"
        node.agent = node.make_agent()  # type: ignore[attr-defined]
        node.reachable = True
