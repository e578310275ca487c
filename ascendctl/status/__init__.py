"""`ascendctl status`: per node and rank the engine's state, release, NPUs, RoCE links; on
the head the deep probe (a real 1-token completion through the API key), the engine's
metrics and the gang supervisor's state; one verdict for the cluster, with reasons that
name the node and rank. One remote execution per node, all nodes at once (the probe runs
inside the head's)."""

from __future__ import annotations

from typing import Any

from ascendctl.inventory import Host, Inventory
from ascendctl.status.model import (
    ChipStatus, ClusterStatus, EngineUnit, NodeStatus, SupervisorStatus, Verdict,
)
from ascendctl.status.parse import node_status, supervisor_status
from ascendctl.status.verdict import verdict

DEFAULT_PROBE_TIMEOUT_S = 5.0
NODE_CALL_MARGIN_S = 30.0

__all__ = ["ChipStatus", "ClusterStatus", "EngineUnit", "NodeStatus", "SupervisorStatus",
           "Verdict", "collect", "node_status", "side_units", "verdict"]


def side_units(inv: Inventory, host: Host) -> list[str]:
    from ascendctl.deploy.release import SIDE_UNITS
    from ascendctl.render.health import SUPERVISOR_UNIT

    return [u for u in SIDE_UNITS if u != SUPERVISOR_UNIT or host.is_head]


def collect(inv: Inventory, pool: Any, *,
            probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> ClusterStatus:
    """One status call per node over the pool's connections, in parallel."""
    from ascendctl.render.health import SUPERVISOR_UNIT, node_engine_units
    from ascendctl.transport.nodecall import call_node
    from ascendctl.transport.results import HostStatus

    ports = inv.cluster.npus_per_node

    def one(conn) -> dict[str, Any]:
        host = inv.host(conn.name)
        kwargs: dict[str, Any] = {"engine_units": node_engine_units(inv, host),
                                  "side_units": side_units(inv, host), "ports": ports}
        if host.is_head:
            kwargs.update(engine_port=inv.serving.port, model=inv.model.served_name,
                          probe_timeout=probe_timeout)
        return call_node(conn, node=host.name, python=inv.deploy.python, entry="status_node",
                         request={"op": "status", "root": inv.deploy.root, "kwargs": kwargs},
                         timeout=probe_timeout + NODE_CALL_MARGIN_S)

    results = pool.map(one)
    nodes = []
    head_raw = None
    for host in inv.hosts:
        result = results[host.name]
        if result.ok:
            nodes.append(node_status(host, result.value, expect_npus=ports,
                                     engine_units=node_engine_units(inv, host)))
            if host.is_head:
                head_raw = result.value
        else:
            error = result.error if result.status == HostStatus.UNREACHABLE \
                else f"the status call failed: {result.error}"
            nodes.append(NodeStatus(name=host.name, rank=host.rank, reachable=False,
                                    error=error))
    sup = supervisor_status(head_raw, SUPERVISOR_UNIT)
    state, reasons = verdict(inv, nodes, sup)
    head = next((n for n in nodes if n.rank == 0), None)
    return ClusterStatus(cluster=inv.cluster.name, verdict=state, reasons=reasons,
                         nodes=nodes, serving=head.probe if head else None, supervisor=sup)
