"""`ascendctl status`: per node the units, release, NPUs, RoCE links and engine metrics,
and one verdict for the cluster. One remote execution per node, all nodes at once."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ascendctl.deploy.release import ALL_UNITS, ENGINE_UNITS
from ascendctl.exitcodes import Exit
from ascendctl.inventory import Host, Inventory

HEALTHY, DEGRADED, DOWN, UNREACHABLE = "healthy", "degraded", "down", "unreachable"


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
class NodeStatus:
    name: str
    rank: int
    reachable: bool
    error: Optional[str] = None
    release: Optional[str] = None
    units: dict[str, str] = field(default_factory=dict)        # unit → active/sub
    restarts: dict[str, int] = field(default_factory=dict)
    chips: list[ChipStatus] = field(default_factory=list)
    npu_error: Optional[str] = None
    links: dict[int, str] = field(default_factory=dict)         # port → UP/DOWN/?
    engine_up: Optional[bool] = None                            # head only
    metrics: dict[str, float] = field(default_factory=dict)     # head only
    problems: list[str] = field(default_factory=list)


@dataclass
class ClusterStatus:
    cluster: str
    verdict: str
    reasons: list[str]
    nodes: list[NodeStatus]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> Exit:
        return {HEALTHY: Exit.OK, DEGRADED: Exit.WARNINGS, DOWN: Exit.FAILED,
                UNREACHABLE: Exit.UNREACHABLE}[self.verdict]


def node_status(host: Host, raw: dict[str, Any], *, expect_npus: int) -> NodeStatus:
    """Parse one node's raw status (pure: npu-smi, hccn_tool and metrics text)."""
    from ascendctl.deploy.bundle import runtime_module
    from ascendctl.facts.hccn import parse_link
    from ascendctl.facts.npu_smi import parse_npu_smi_info

    status = NodeStatus(name=host.name, rank=host.rank, reachable=True,
                        release=raw.get("current"))
    for unit, state in raw.get("units", {}).items():
        if state.get("load") == "loaded":
            status.units[unit] = f"{state['active']}/{state['sub']}"
            status.restarts[unit] = state.get("restarts", 0)
    info = parse_npu_smi_info(raw.get("npu_smi", {}).get("out", ""))
    if info.ok:
        status.chips = [ChipStatus(c.npu_id, c.chip_id, c.health, c.hbm_used_mb, c.hbm_total_mb,
                                   c.aicore_pct, c.temp_c) for c in info.chips]
    else:
        status.npu_error = info.error
    for port, link in enumerate(raw.get("links", [])):
        status.links[port] = (parse_link(link.get("out", "")) or "?") if link.get("rc") == 0 \
            else "?"
    engine = raw.get("engine")
    if engine is not None:
        status.engine_up = engine["health"].get("status") == 200
        if engine["metrics"].get("status") == 200:
            status.metrics = runtime_module("probe").parse_metrics(engine["metrics"]["body"])
    status.problems = _problems(status, expect_npus)
    return status


def _problems(status: NodeStatus, expect_npus: int) -> list[str]:
    problems = []
    if status.npu_error:
        problems.append(f"npu-smi: {status.npu_error}")
    elif len({c.npu for c in status.chips}) < expect_npus:
        problems.append(f"{len({c.npu for c in status.chips})} of {expect_npus} NPUs visible")
    for chip in status.chips:
        if chip.health != "OK":
            problems.append(f"NPU {chip.npu} health {chip.health}")
    down = [str(p) for p, state in status.links.items() if state != "UP"]
    if down:
        problems.append(f"RoCE port(s) {', '.join(down)} not UP")
    for unit, state in status.units.items():
        if not state.startswith("active/"):
            problems.append(f"{unit} {state}")
    return problems


def verdict(inv: Inventory, nodes: list[NodeStatus]) -> tuple[str, list[str]]:
    reasons: list[str] = []
    unreachable = [n.name for n in nodes if not n.reachable]
    if unreachable:
        reasons.append(f"unreachable: {', '.join(unreachable)}")
        return UNREACHABLE, reasons
    releases = {n.release for n in nodes}
    engines_ok = all(n.units.get(u, "").startswith("active/")
                     for n in nodes for u in ENGINE_UNITS if u in n.units)
    deployed = all(any(u in n.units for u in ENGINE_UNITS) for n in nodes)
    head = next(n for n in nodes if n.rank == 0)
    if not deployed or None in releases:
        reasons.append("not deployed on every node (`ascendctl deploy`)")
        return DOWN, reasons
    if len(releases) > 1:
        reasons.append("nodes disagree on the release: " + ", ".join(
            f"{n.name}={n.release}" for n in nodes))
    if not engines_ok:
        reasons.append("an engine unit is not active")
    if not head.engine_up:
        reasons.append(f"the API on {head.name}:{inv.serving.port} does not answer /health")
    if reasons:
        return DOWN, reasons
    for node in nodes:
        reasons += [f"{node.name}: {p}" for p in node.problems]
    return (DEGRADED if reasons else HEALTHY), reasons


def collect(inv: Inventory, pool: Any) -> ClusterStatus:
    """One `status` call per node over the pool's connections, in parallel."""
    from ascendctl.deploy.context import DeployContext

    context = DeployContext(inv)
    ports = inv.cluster.npus_per_node

    def one(conn) -> dict[str, Any]:
        host = inv.host(conn.name)
        return context.ops(host, conn).call(
            "status", units=list(ALL_UNITS), ports=ports,
            engine_port=inv.serving.port if host.is_head else None)

    results = pool.map(one)
    nodes = []
    for host in inv.hosts:
        result = results[host.name]
        if result.ok:
            nodes.append(node_status(host, result.value, expect_npus=ports))
        else:
            nodes.append(NodeStatus(name=host.name, rank=host.rank, reachable=False,
                                    error=result.error))
    state, reasons = verdict(inv, nodes)
    return ClusterStatus(cluster=inv.cluster.name, verdict=state, reasons=reasons,
                         nodes=nodes)
