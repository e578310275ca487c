"""Every config a node reads, as the renderer writes it and the node loads it: one typed
dataclass each, one `to_json` and one strict `from_json` / `load` (typedjson.py: unknown
keys refused, types checked, the error names the file and the key). Standard library only.

    engine.json, ray.json   LaunchConfig      the launcher of an engine unit
    watchdog.json           WatchdogConfig    the HBM watchdog
    agent.json              AgentConfig       the node agent (inside the exporter)
    supervisor.json         SupervisorConfig  the gang supervisor (head only)
    gateway.json            GatewayConfig     the gateway watcher (the gateway host only)
    faults.json             FaultsConfig      the fault monitor (faults/monitor.py)
    <root>/supervisor.hold  Hold              a deploy or an operator holds recovery

The controller (ascendctl/render/) builds these and writes `to_json()`; the node code
reads them with the same class. Field order is the order of the keys in the file.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Tuple, Type

from ascendctl_runtime.gangrules import RANK_START_WAIT_S, SETTLE_S
from ascendctl_runtime.layout import (
    AGENT_CONFIG, ENGINE_CONFIG, ENGINE_UNIT, FAULTS_CONFIG, GATEWAY_CONFIG, RAY_CONFIG,
    SUPERVISOR_CONFIG, WATCHDOG_CONFIG,
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


# where CANN writes the host-side plog and the device event log (docs/faults.md)
DEFAULT_FAULT_LOG_GLOBS = (
    "/root/ascend/log/debug/plog/*.log",
    "/root/ascend/log/run/plog/*.log",
    "/var/log/npu/slog/dev-os-*/run/event/event_*.log",
)
MAX_FAULT_IDS = 64
MAX_FAULT_GLOBS = 32


@dataclass
class FaultsConfig(Record):
    """faults.json: what the node's fault monitor reads, how often, and the merged policy
    table (faults/policy.py's table_to_dict document, format ascendctl-faults/1)."""

    cluster: str
    node: str
    root: str
    npus: List[int]                     # `npu-smi info -i N` ids; chip 0 of each
    ports: List[int]                    # `hccn_tool -i P` device ids
    policy: Dict[str, Any]              # faults/policy.py table_to_dict of the merged table
    serving_groups: int                 # groups the gateway balances; 1: no drain, no isolate
    interval_s: float = 10.0
    log_globs: List[str] = field(default_factory=lambda: list(DEFAULT_FAULT_LOG_GLOBS))
    engine_metrics_url: Optional[str] = None     # the head engine's /metrics; None on followers
    command_timeout_s: float = 10.0
    events_kept: int = 200

    def validate(self) -> None:
        for name in ("npus", "ports"):
            ids = getattr(self, name)
            if len(ids) > MAX_FAULT_IDS or len(set(ids)) != len(ids) or \
                    any(not 0 <= i < 1024 for i in ids):
                raise InvalidField(name, f"must be at most {MAX_FAULT_IDS} distinct ids in [0, 1024)")
        if not 1 <= self.serving_groups <= 10000:
            raise InvalidField("serving_groups", "must be in [1, 10000]")
        if not 1.0 <= self.interval_s <= 3600.0:
            raise InvalidField("interval_s", "must be in [1, 3600] seconds")
        if not 0.0 < self.command_timeout_s <= 300.0:
            raise InvalidField("command_timeout_s", "must be in (0, 300] seconds")
        if not 1 <= self.events_kept <= 10000:
            raise InvalidField("events_kept", "must be in [1, 10000]")
        if len(self.log_globs) > MAX_FAULT_GLOBS:
            raise InvalidField("log_globs", f"must be at most {MAX_FAULT_GLOBS} patterns")
        for index, pattern in enumerate(self.log_globs):
            if not pattern.startswith("/") or len(pattern) > 1024:
                raise InvalidField(f"log_globs[{index}]", "must be an absolute path of at most 1024 characters")
        url = self.engine_metrics_url
        if url is not None and (not url.startswith(("http://", "https://")) or len(url) > 1024):
            raise InvalidField("engine_metrics_url", "must be an http(s) URL of at most 1024 characters")
        # the table itself is read by the strict policy loader when the monitor starts
        # (faults/policy.py table_from_dict): contract.py ships with every node call, the
        # faults package only with the agent
        if self.policy.get("format") != "ascendctl-faults/1":
            raise InvalidField("policy.format", "must be \"ascendctl-faults/1\"")


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
    GATEWAY_CONFIG: GatewayConfig, FAULTS_CONFIG: FaultsConfig,
}
