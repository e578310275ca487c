"""Every config a node reads, as the renderer writes it and the node loads it: one typed
dataclass each, one `to_json` and one strict `from_json` / `load` (typedjson.py: unknown
keys refused, types checked, the error names the file and the key). Standard library only.

    engine.json, ray.json   LaunchConfig      the launcher of an engine unit
    watchdog.json           WatchdogConfig    the HBM watchdog
    agent.json              AgentConfig       the node agent (inside the exporter)
    supervisor.json         SupervisorConfig  the gang supervisor (head only)
    gateway.json            GatewayConfig     the gateway watcher (the gateway host only)
    <root>/supervisor.hold  Hold              a deploy or an operator holds recovery

The controller (ascendctl/render/) builds these and writes `to_json()`; the node code
reads them with the same class. Field order is the order of the keys in the file.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Literal, Optional, Tuple, Type

from ascendctl_runtime.gangrules import RANK_START_WAIT_S, SETTLE_S
from ascendctl_runtime.layout import (
    AGENT_CONFIG, ENGINE_CONFIG, ENGINE_UNIT, GATEWAY_CONFIG, RAY_CONFIG, SUPERVISOR_CONFIG, WATCHDOG_CONFIG,
)
from ascendctl_runtime.typedjson import OMIT_WHEN_NONE, InvalidField, Record, excerpt


@dataclass
class LaunchConfig(Record):
    """How the launcher starts one rank's engine (or Ray) process. The launcher uses argv,
    rank, headless, cpus, numa_node, stop_grace_seconds and workdir; the other keys
    describe the rank to whoever reads the release (the doctor, an operator)."""

    kind: Literal["engine", "ray"] = "engine"
    argv: List[str] = field(default_factory=list)
    env_file: Optional[str] = None
    secrets_file: Optional[str] = None
    cluster: str = ""
    node: str = ""
    rank: int = 0
    headless: bool = False
    mode: str = ""
    release: str = ""
    release_dir: str = ""
    cpus: Optional[str] = None           # e.g. "0-23,48-71"; bound with sched_setaffinity
    numa_node: Optional[int] = None      # bound with numactl when it is installed
    startup_timeout_s: float = 1800.0
    stop_grace_seconds: float = 30.0
    data_parallel_ranks: Optional[List[int]] = field(default=None, metadata=OMIT_WHEN_NONE)
    ready_url: Optional[str] = field(default=None, metadata=OMIT_WHEN_NONE)
    workdir: Optional[str] = field(default=None, metadata=OMIT_WHEN_NONE)

    def validate(self) -> None:
        if not self.argv:
            raise InvalidField("argv", "must be a non-empty list of strings")


@dataclass
class WatchdogConfig(Record):
    unit: str = ENGINE_UNIT
    threshold: float = 0.97
    interval_seconds: float = 15.0
    consecutive: int = 3
    startup_grace_seconds: float = 1800.0
    cooldown_seconds: float = 600.0
    request_file: str = ""     # where the restart request goes (the agent reads it)

    def validate(self) -> None:
        if not 0.5 < self.threshold <= 1.0:
            raise InvalidField("threshold", "must be in (0.5, 1.0]")
        if self.consecutive < 1:
            raise InvalidField("consecutive", "must be at least 1")
        if self.interval_seconds <= 0:
            raise InvalidField("interval_seconds", "must be positive")


@dataclass
class AgentConfig(Record):
    cluster: str
    node: str
    rank: int
    release: str
    root: str
    units: List[str]                         # this node's engine units, in start order
    plan_url: str                            # the head's /health/plan
    secrets_file: Optional[str] = None       # holds ASCENDCTL_HEALTH_TOKEN
    coordination_port: Optional[int] = None  # the head's master / DP RPC / Ray port
    is_head: bool = False
    interval_s: float = 2.0
    stop_grace_s: float = 15.0               # SIGTERM, then SIGKILL (a recovery stop only)
    plan_ttl_s: float = 10.0                 # the head serves a plan at most this old
    npu_cache_s: float = 3.0


@dataclass(frozen=True)
class RankSpec(Record):
    node: str
    rank: int
    state_url: str
    units: Tuple[str, ...]


@dataclass
class SupervisorConfig(Record):
    cluster: str
    release: str
    root: str
    ranks: List[RankSpec]
    steps: List[Tuple[str, str]]            # (node, unit) in start order
    probe_port: int
    probe_model: str
    secrets_file: Optional[str] = None
    head_node: str = ""
    probe_interval_s: float = 5.0
    probe_timeout_s: float = 10.0
    probe_failure_s: float = 30.0
    startup_timeout_s: float = 1800.0
    rank_start_wait_s: float = float(RANK_START_WAIT_S)
    settle_s: float = SETTLE_S
    max_attempts: int = 3
    backoff_s: float = 10.0
    backoff_max_s: float = 300.0
    stop_timeout_s: float = 120.0
    npu_free_timeout_s: float = 120.0
    stable_s: float = 600.0
    tick_s: float = 2.0
    state_timeout_s: float = 3.0
    group: str = ""                          # the serving group this supervisor keeps
    gateway_state_url: Optional[str] = None  # the gateway watcher's /health/gateway
    drain_timeout_s: float = 60.0            # a group in maintenance: out, then drained

    def validate(self) -> None:
        if self.max_attempts < 1:
            raise InvalidField("max_attempts", "must be at least 1")
        nodes = {spec.node for spec in self.ranks}
        for index, (node, _unit) in enumerate(self.steps):
            if node not in nodes:
                raise InvalidField(f"steps[{index}][0]", f"{excerpt(node)} is none of the ranks")
        if self.head_node and self.head_node not in nodes:
            raise InvalidField("head_node", f"{excerpt(self.head_node)} is none of the ranks")

    def rank_of(self, node: str) -> int:
        return next(r.rank for r in self.ranks if r.node == node)


@dataclass(frozen=True)
class Hold(Record):
    """`<root>/supervisor.hold`: the supervisor only observes until `until` (epoch seconds,
    the head's clock)."""

    until: float
    by: str = "?"
    reason: str = ""


@dataclass(frozen=True)
class GatewayGroup(Record):
    name: str
    health_url: str                 # the head engine's /health
    nodes: Tuple[str, ...]
    state_urls: Tuple[str, ...]     # each node's agent /health/state, in the order of nodes


@dataclass
class GatewayConfig(Record):
    """gateway.json (the gateway host only): the watcher that takes a group whose node is
    in maintenance out of the balancer (gateway.py)."""

    cluster: str
    root: str
    site_path: str
    groups: List[GatewayGroup]
    interval_s: float = 2.0
    state_timeout_s: float = 2.0

    def validate(self) -> None:
        for index, group in enumerate(self.groups):
            if len(group.nodes) != len(group.state_urls):
                raise InvalidField(f"groups[{index}].state_urls", "one per node")
        if not self.site_path.startswith("/etc/nginx/"):
            raise InvalidField("site_path", "the site lives under /etc/nginx/")


# The configs of a release, by the file that holds each.
RELEASE_CONFIGS: Dict[str, Type[Record]] = {
    ENGINE_CONFIG: LaunchConfig, RAY_CONFIG: LaunchConfig, WATCHDOG_CONFIG: WatchdogConfig,
    AGENT_CONFIG: AgentConfig, SUPERVISOR_CONFIG: SupervisorConfig,
    GATEWAY_CONFIG: GatewayConfig,
}
