"""What `ascendctl status` reports: typed, and the same shape in --json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Optional

from ascendctl.exitcodes import Exit


class Verdict(str, Enum):
    """The cluster's verdict. `healthy`: the deep probe (a real completion through the API
    key) answers and nothing is wrong; `degraded`: it answers, but something needs
    attention; `down`: it does not answer, a rank is not running, or the group is being
    restarted."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


@dataclass
class ChipStatus:
    npu: int
    chip: int
    health: str
    hbm_used_mb: Optional[int]
    hbm_total_mb: Optional[int]
    aicore_pct: Optional[int]
    temp_c: Optional[int]


@dataclass
class EngineUnit:
    """One engine unit of one rank (ascendctl_runtime.engine_state's words)."""

    unit: str
    state: str                      # running, crashed, stopped, not-started, ...
    since: Optional[float] = None   # epoch seconds (the node's clock)
    ago_s: Optional[float] = None   # how long ago, measured on the node
    exit: Optional[str] = None      # "signal KILL", "status 2"
    journal: Optional[str] = None   # the telling log line of a crash
    restarts: int = 0               # starts by the recovery agent in this release
    main_pid: int = 0
    stopped_by_recovery: Optional[int] = None   # the recovery generation that stopped it


@dataclass
class NpuHolder:
    npu: int
    pid: int
    name: str
    mem_mb: int
    engine: bool


@dataclass
class NodeStatus:
    name: str
    rank: int
    reachable: bool
    group: str = "all"              # its serving group
    error: Optional[str] = None
    release: Optional[str] = None
    units: dict[str, str] = field(default_factory=dict)        # unit → active/sub
    restarts: dict[str, int] = field(default_factory=dict)     # unit → agent starts
    engine: list[EngineUnit] = field(default_factory=list)
    chips: list[ChipStatus] = field(default_factory=list)
    npu_error: Optional[str] = None
    npu_processes: list[NpuHolder] = field(default_factory=list)
    links: dict[int, str] = field(default_factory=dict)         # port → UP/DOWN/?
    engine_up: Optional[bool] = None        # head: /health answered 200 (not proof)
    probe: Optional[dict[str, Any]] = None  # head: the deep probe's answer
    metrics: dict[str, float] = field(default_factory=dict)     # head only
    problems: list[str] = field(default_factory=list)
    maintenance: Optional[dict[str, Any]] = None    # drained / isolated (ascendctl node)
    fault_events: list[dict[str, Any]] = field(default_factory=list)   # the fault monitor
    fault_signals: list[dict[str, Any]] = field(default_factory=list)  # present at its reading
    fault_limits: Optional[str] = None      # e.g. one group: drain and isolate only alert
    role: Optional[str] = None              # prefill | decode in a PD unit
    router_metrics: dict[str, float] = field(default_factory=dict)   # a PD unit's router

    @property
    def where(self) -> str:
        side = f"{self.role} " if self.role else ""
        return f"{side}rank {self.rank} ({self.name})"

    @property
    def foreign(self) -> list[NpuHolder]:
        return [p for p in self.npu_processes if not p.engine]


@dataclass
class SupervisorStatus:
    """The head's gang supervisor, as its state file says."""

    running: bool                         # its unit is active and the state is fresh
    unit_state: Optional[str] = None
    phase: Optional[str] = None
    generation: Optional[int] = None
    attempt: int = 0
    max_attempts: Optional[int] = None
    cause: Optional[str] = None
    cause_node: Optional[str] = None
    cause_rank: Optional[int] = None
    detected_ago_s: Optional[float] = None
    waiting_for: list[str] = field(default_factory=list)
    paused: Optional[str] = None
    held: Optional[dict[str, Any]] = None
    gave_up_reason: Optional[str] = None
    last_error: Optional[str] = None
    recoveries_total: int = 0
    last_recovery: Optional[dict[str, Any]] = None
    error: Optional[str] = None

    @property
    def recovering(self) -> bool:
        return self.running and self.phase in ("stopping", "npus", "backoff", "starting",
                                               "warming")


@dataclass
class GroupStatus:
    """One serving group (replica): its own verdict, from its head's probe and supervisor."""

    name: str
    head: str
    verdict: Verdict
    reasons: list[str]
    nodes: list[str]
    serving: Optional[dict[str, Any]] = None
    supervisor: Optional[SupervisorStatus] = None
    kv_transfer: Optional[dict[str, Any]] = None    # a PD unit: KV decode took from prefill
    envelope: Optional[int] = None     # the head's serving release's load envelope


@dataclass
class ProxyStatus:
    """nginx on the gateway (serving.proxy)."""

    node: str
    port: int
    state: Optional[str]            # nginx.service active/sub, None: the node is unreachable


@dataclass
class ClusterStatus:
    cluster: str
    verdict: Verdict                # the whole service's (one group: the group's)
    reasons: list[str]
    nodes: list[NodeStatus]
    serving: Optional[dict[str, Any]] = None       # the first group's head probe
    supervisor: Optional[SupervisorStatus] = None  # the first group's supervisor
    groups: list[GroupStatus] = field(default_factory=list)
    proxy: Optional[ProxyStatus] = None
    # the unsafe container options the inventory acknowledges (engine.allow_unsafe), and
    # the warnings about them: they do not change the verdict
    unsafe_engine_options: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        for group in data["groups"]:
            group["verdict"] = group["verdict"].value
        return data

    @property
    def unreachable(self) -> list[str]:
        return [n.name for n in self.nodes if not n.reachable]

    @property
    def exit_code(self) -> Exit:
        if self.unreachable:
            return Exit.UNREACHABLE
        return {Verdict.HEALTHY: Exit.OK, Verdict.DEGRADED: Exit.WARNINGS,
                Verdict.DOWN: Exit.FAILED}[self.verdict]
