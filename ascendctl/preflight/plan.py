"""What the gather script does on each host: its `GatherParams` and the ping matrix.

Ping targets are the other nodes' device IPs. They come from the inventory's
`device_ips`; a node whose inventory entry has none is pinged in a second, ping-only
round trip once its /etc/hccn.conf has been read by the first (a node's targets are the
*other* nodes' addresses, which no script on that node can know in advance).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from ascendctl.facts import GatherParams, plan_pings
from ascendctl.inventory import Host, Inventory
from ascendctl.preflight.expectations import chip_expectation
from ascendctl.engine.preflight import engine_gather_params
from ascendctl.preflight.launch import launch_ports, ports_bound, serving_python

PingStrategy = Literal["pairs", "ring", "all-ports", "none"]
PING_STRATEGIES: tuple[str, ...] = ("pairs", "ring", "all-ports", "none")


def ping_peers(nodes: Sequence[str], node: str, strategy: str) -> list[str]:
    """The nodes `node` pings (nodes in rank order).

    pairs: node i pings the next floor(N/2) nodes round the ring: every pair of nodes
        is covered (an echo tests both directions) and every node sends pings of its own,
        so each node gets a verdict; N/2 peers per node.
    ring: only the next node round the ring (constant work per node; misses a fault
        between two nodes that are not neighbours).
    all-ports: every other node, every port (N-1 x ports^2 pings per node).
    none: no pings.
    """
    if strategy == "none" or node not in nodes or len(nodes) < 2:
        return []
    n = len(nodes)
    i = nodes.index(node)
    if strategy == "all-ports":
        return [x for x in nodes if x != node]
    reach = 1 if strategy == "ring" else n // 2
    return [nodes[(i + k) % n] for k in range(1, reach + 1)]


def ping_targets(local_ports: Sequence[int], peers: Mapping[str, Mapping[int, str]],
                 strategy: str) -> dict[int, tuple[str, ...]]:
    return plan_pings(local_ports, peers, all_ports=strategy == "all-ports")


def gather_params(inv: Inventory, host: Host, *, play_hosts: Sequence[str],
                  pings: str = "pairs", known_ips: Mapping[str, Mapping[int, str]] | None = None,
                  max_jobs: int = 16) -> GatherParams:
    """The gather script's parameters for `host`. `known_ips` (node -> device -> IP)
    defaults to the inventory's device_ips; peers without IPs are left out (pinged in
    the second round)."""
    _, cards, dies = chip_expectation(inv)
    if known_ips is None:
        known_ips = {h.name: dict(enumerate(h.device_ips)) for h in inv.hosts if h.device_ips}
    # RoCE traffic and the launch ports stay within the host's serving group
    group = inv.view_of(host)
    order = [h.name for h in group.hosts if h.name in set(play_hosts)]
    peers = {p: known_ips[p] for p in ping_peers(order, host.name, pings) if p in known_ips}
    roce_ports = range(cards * dies)
    probe_ports = tuple(u.port for u in launch_ports(group)) if not host.is_head else ()
    model_path = inv.deploy.root if inv.model.source is not None else inv.model.path
    return GatherParams(
        npu_count=cards, chips_per_npu=dies,
        model_path=model_path,
        listen_ports=tuple(u.port for u in ports_bound(inv, host)),
        probe_host=group.head.ip if probe_ports else None, probe_ports=probe_ports,
        ping_targets=ping_targets(roce_ports, peers, pings),
        path_mtu=inv.cluster.roce.mtu, max_jobs=max_jobs,
        **{"python": serving_python(inv), **engine_gather_params(inv)},
    )


def second_round_peers(inv: Inventory, host: Host, *, play_hosts: Sequence[str],
                       pings: str) -> list[str]:
    """Peers of `host` that the first round could not ping (no inventory device_ips)."""
    order = [h.name for h in inv.view_of(host).hosts if h.name in set(play_hosts)]
    missing = {h.name for h in inv.hosts if not h.device_ips}
    return [p for p in ping_peers(order, host.name, pings) if p in missing]
