"""`ascendctl status`: per node and rank the engine's state, release, NPUs, RoCE links; on
each serving group's head the deep probe (a real 1-token completion through the API key),
the engine's metrics and the gang supervisor's state; a verdict per serving group and one
for the whole service (degraded while some group does not serve), with reasons that name
the group, node and rank. One remote execution per node, all nodes at once (the probe runs
inside each head's)."""

from __future__ import annotations

from typing import Any, Optional

from ascendctl_runtime.layout import SIDE_UNITS, SUPERVISOR_UNIT

from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import entry_port, is_router_host, side_view
from ascendctl.render.health import node_engine_units
from ascendctl.status.model import (
    ChipStatus, ClusterStatus, EngineUnit, GroupStatus, NodeStatus, ProxyStatus,
    SupervisorStatus, Verdict,
)
from ascendctl.status.parse import node_status, supervisor_status
from ascendctl.status.verdict import service_verdict, verdict
from ascendctl.transport.nodecall import call_node
from ascendctl.transport.results import HostStatus

DEFAULT_PROBE_TIMEOUT_S = 5.0
NODE_CALL_MARGIN_S = 30.0
PROXY_UNIT = "nginx.service"

__all__ = ["ChipStatus", "ClusterStatus", "EngineUnit", "GroupStatus", "NodeStatus",
           "ProxyStatus", "SupervisorStatus", "Verdict", "collect", "judge", "node_status",
           "side_units", "verdict"]


def side_units(inv: Inventory, host: Host) -> list[str]:
    units = [u for u in SIDE_UNITS if u != SUPERVISOR_UNIT or host.is_head]
    if inv.serving.proxy.enabled and host.name == (inv.gateway_name
                                                   or inv.serving_groups[0].head):
        units.append(PROXY_UNIT)
    return units


def collect(inv: Inventory, pool: Any, *,
            probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> ClusterStatus:
    """One status call per node over the pool's connections, in parallel; a verdict per
    serving group (from its head's deep probe and supervisor) and for the whole service."""
    ports = inv.cluster.npus_per_node

    def one(conn) -> dict[str, Any]:
        host = inv.host(conn.name)
        kwargs: dict[str, Any] = {"engine_units": node_engine_units(inv, host),
                                  "side_units": side_units(inv, host), "ports": ports}
        if host.is_head:
            kwargs.update(engine_port=entry_port(inv), model=inv.model.served_name,
                          probe_timeout=probe_timeout)
        if inv.pd is not None:
            side = side_view(inv, host)
            if side.head.name == host.name:     # a side's API server: its engine's metrics
                kwargs["metrics_port"] = side.serving.port
            if is_router_host(inv, host):
                kwargs["router_metrics_port"] = inv.pd.router.metrics_port
        return call_node(conn, node=host.name, python=inv.deploy.python, entry="status_node",
                         request={"op": "status", "root": inv.deploy.root, "kwargs": kwargs},
                         timeout=probe_timeout + NODE_CALL_MARGIN_S)

    results = pool.map(one)
    nodes = []
    raws: dict[str, Any] = {}
    for host in inv.hosts:
        result = results[host.name]
        if result.ok:
            status = node_status(host, result.value, expect_npus=ports,
                                 engine_units=node_engine_units(inv, host))
            raws[host.name] = result.value
        else:
            error = result.error if result.status == HostStatus.UNREACHABLE \
                else f"the status call failed: {result.error}"
            status = NodeStatus(name=host.name, rank=host.rank, reachable=False, error=error)
        status.group = host.serving_group
        if inv.pd is not None:      # named by its side and its rank there
            status.role = host.pd_role
            status.rank = side_view(inv, host).host(host.name).rank
        nodes.append(status)
    return judge(inv, nodes, raws)


def judge(inv: Inventory, nodes: list[NodeStatus], raws: dict[str, Any]) -> ClusterStatus:
    """Each group's verdict, then the service's. Pure."""
    groups = []
    for view in inv.group_views():
        members = [n for n in nodes if n.group == view.serving_groups[0].name]
        sup = supervisor_status(raws.get(view.head.name), SUPERVISOR_UNIT)
        state, reasons = verdict(view, members, sup)
        head = next((n for n in members if n.name == view.head.name), None)
        groups.append(GroupStatus(name=view.serving_groups[0].name, head=view.head.name,
                                  verdict=state, reasons=reasons,
                                  nodes=[n.name for n in members],
                                  serving=head.probe if head else None, supervisor=sup,
                                  kv_transfer=kv_transfer(members) if inv.pd else None,
                                  envelope=envelope_of(raws.get(view.head.name))))
    proxy = proxy_status(inv, nodes)
    state, reasons = service_verdict(inv, groups, proxy)
    unsafe = list(inv.unsafe_engine_options)
    return ClusterStatus(cluster=inv.cluster.name, verdict=state, reasons=reasons,
                         nodes=nodes, serving=groups[0].serving,
                         supervisor=groups[0].supervisor, groups=groups, proxy=proxy,
                         unsafe_engine_options=unsafe, warnings=unsafe_warnings(unsafe))


def envelope_of(raw_head: Optional[dict[str, Any]]) -> Optional[int]:
    """The load envelope the head reports for the release it serves (promotion evidence)."""
    value = (raw_head or {}).get("envelope")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def kv_transfer(members: list[NodeStatus]) -> dict[str, Any]:
    """What a PD unit's counters say about KV moving from prefill to decode: the router's
    requests (each went to prefill, then to decode) and the KV tokens the decode engines
    took from their connector instead of computing them."""
    router = next((n.router_metrics for n in members if n.router_metrics), {})
    decode = [n for n in members if n.role == "decode" and n.metrics]

    def total(name: str) -> Optional[float]:
        return sum(n.metrics.get(name, 0.0) for n in decode) if decode else None

    return {"requests": router.get("vllm_router_pd_requests_total"),
            "prefill_requests": router.get("vllm_router_pd_prefill_requests_total"),
            "decode_requests": router.get("vllm_router_pd_decode_requests_total"),
            "router_errors": router.get("vllm_router_pd_errors_total"),
            "decode_external_query_tokens": total("vllm:external_prefix_cache_queries_total"),
            "decode_external_hit_tokens": total("vllm:external_prefix_cache_hits_total")}


def unsafe_warnings(unsafe: list[str]) -> list[str]:
    if not unsafe:
        return []
    return [f"the engine runs with unsafe options acknowledged in engine.allow_unsafe: "
            f"{', '.join(unsafe)}"]


def proxy_status(inv: Inventory, nodes: list[NodeStatus]) -> Optional[ProxyStatus]:
    gateway = inv.gateway
    if gateway is None:
        return None
    node = next(n for n in nodes if n.name == gateway.name)
    state = node.units.get(PROXY_UNIT, "not installed") if node.reachable else None
    return ProxyStatus(node=gateway.name, port=inv.serving.proxy.port, state=state)
