"""One port ledger per node of a PD layout, and every overlap in it with both owners named.

What a node holds (vllm-ascend v0.25.1rc1):
- the API server(s): `--port`, one port per server (external DP runs one per local rank,
  from `port_start` / `--vllm-start-port` up);
- the DP RPC port (`--data-parallel-rpc-port`) on the instance's DP master;
- Mooncake's handshake ports: `kv_port + dp_rank × tp_size + tp_rank` for every global
  DP rank on the node (mooncake_connector.py `side_channel_port` + `device_index`); on a
  DP master that is the docs' "kv_port to kv_port + num_chips";
- AscendDirectTransport (the HIXL/ascend_direct transfer engine): random ports in
  `[20000, 20000 + 1000 × NPUs per node)` (pd_disaggregation_mooncake_multi_node.md);
- the project's metrics exporter, when the layout names its port;
- the PD proxy on its node;
- any other listener the layout names (an inventory's gateway).
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.pd.layout import NodeLaunch, PdLayout, Where

ADT_BASE_PORT = 20000
ADT_PORTS_PER_NPU = 1000
MAX_PORT = 65535

OWNER_API = "API server"
OWNER_DP_RPC = "DP RPC port"
OWNER_KV = "Mooncake kv_port handshake"
OWNER_ADT = "AscendDirectTransport (HIXL) random ports"
OWNER_EXPORTER = "metrics exporter"
OWNER_PROXY = "PD proxy"


@dataclass(frozen=True)
class PortUse:
    owner: str
    ports: range
    where: Where
    field: str
    # a range another process allocates from at random: only a port *we* bind there is a
    # conflict, two reserved ranges never are
    reserved: bool = False

    def describe(self, *, located: bool = True) -> str:
        span = (f"port {self.ports.start}" if len(self.ports) == 1 else
                f"ports {self.ports.start}-{self.ports.stop - 1}")
        return f"{self.owner} ({span}, {self.where}: {self.field})" if located else \
            f"{self.owner} ({span})"


@dataclass(frozen=True)
class Overlap:
    node: int
    first: PortUse
    second: PortUse
    ports: range

    def involves(self, owner: str) -> bool:
        return owner in (self.first.owner, self.second.owner)


def adt_range(npus: int) -> range:
    return range(ADT_BASE_PORT, ADT_BASE_PORT + ADT_PORTS_PER_NPU * npus)


def node_ledger(layout: PdLayout, node: NodeLaunch) -> list[PortUse]:
    uses: list[PortUse] = []
    if node.api_port is not None and not node.headless:      # --headless: no API server
        uses.append(PortUse(OWNER_API, range(node.api_port, node.api_port + node.api_servers),
                            node.at("api_port"), "--port"))
    if node.dp_rpc_port is not None and _is_dp_master(layout, node):
        uses.append(PortUse(OWNER_DP_RPC, range(node.dp_rpc_port, node.dp_rpc_port + 1),
                            node.at("dp_rpc_port"), "--data-parallel-rpc-port"))
    uses.append(PortUse(OWNER_KV, node.kv_ports, node.at("kv_port"),
                        "kv_transfer_config.kv_port"))
    uses.append(PortUse(OWNER_ADT, adt_range(node.npus), node.at("npus"), "NPUs per node",
                        reserved=True))
    if layout.exporter_port is not None:
        uses.append(PortUse(OWNER_EXPORTER, range(layout.exporter_port, layout.exporter_port + 1),
                            layout.where.get("exporter_port", Where(layout.file)),
                            "exporter_port"))
    proxy = layout.proxy
    if proxy is not None and proxy.port is not None and proxy.node == node.index:
        uses.append(PortUse(OWNER_PROXY, range(proxy.port, proxy.port + 1), proxy.where,
                            "proxy --port"))
    for listener in layout.listeners:
        if listener.node == node.index:
            uses.append(PortUse(listener.owner, range(listener.port, listener.port + 1),
                                listener.where, listener.field))
    return uses


def _is_dp_master(layout: PdLayout, node: NodeLaunch) -> bool:
    for instance in layout.instances():
        if node in instance.nodes:
            return instance.master is node
    return True


def overlaps(layout: PdLayout) -> list[Overlap]:
    """Every pair of port uses on one node that share a port (two reserved ranges never
    conflict with each other)."""
    found: list[Overlap] = []
    for node in layout.nodes:
        uses = node_ledger(layout, node)
        for i, first in enumerate(uses):
            for second in uses[i + 1:]:
                if first.reserved and second.reserved:
                    continue
                shared = range(max(first.ports.start, second.ports.start),
                               min(first.ports.stop, second.ports.stop))
                if len(shared) > 0:
                    found.append(Overlap(node.index, first, second, shared))
    return found


def out_of_range(layout: PdLayout) -> list[tuple[int, PortUse]]:
    """Port uses that reach past 65535 or below 1 (a kv_port whose span runs off the end)."""
    return [(node.index, use) for node in layout.nodes for use in node_ledger(layout, node)
            if not use.reserved and (use.ports.start < 1 or use.ports.stop - 1 > MAX_PORT)]
