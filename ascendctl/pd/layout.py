"""A prefill/decode (PD) disaggregated deployment as data: which node runs what, and where
each value was read from.

A layout is a prefill part and a decode part; each part is one or more DP instances
(one vLLM data-parallel group, possibly spanning several nodes), each instance one or more
nodes. Every value a check may name carries its `file:line`, so a finding points at the
text an operator must change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, ...] = ("prefill", "decode")
# The kv_role each side must run (vLLM's KVTransferConfig spelling).
KV_ROLE_OF: dict[Role, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}

LAYERWISE_CONNECTOR = "MooncakeLayerwiseConnector"
# The proxies vllm-ascend ships (examples/disaggregated_prefill_v1/): which side a request
# reaches first.
PROXY_P_FIRST = "load_balance_proxy_server_example.py"
PROXY_D_FIRST = "load_balance_proxy_layerwise_server_example.py"

# Hybrid Mamba models: the Mooncake PD guide names Qwen-Next and Qwen3.5; the Qwen3.5-27B /
# Qwen3.6-27B tutorial calls both families "hybrid Mamba-Transformer".
_HYBRID_MODEL = re.compile(r"qwen3[._-]?5|qwen3[._-]?6|qwen3[._-]?next", re.IGNORECASE)


@dataclass(frozen=True)
class Where:
    """A place in an input file (line 1-based; None when only the file is known).
    `field`: the input's own name for the value, where it differs from the rule's (an
    inventory's `pd.decode.kv_port` for `kv_transfer_config.kv_port`)."""

    file: str
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class ExtraLayout:
    """`kv_connector_extra_config.prefill` or `.decode`: the layout a node believes the
    other side (and its own) has."""

    dp_size: int | None
    tp_size: int | None


@dataclass(frozen=True)
class KvTransfer:
    """The parts of `--kv-transfer-config` the cross-node rules read."""

    connector: str
    kv_role: str
    kv_port: int
    engine_id: str | None
    prefill: ExtraLayout
    decode: ExtraLayout
    lookup_rpc_port: int | None = None


@dataclass(frozen=True)
class NodeLaunch:
    """One node of the layout: the vLLM server(s) it runs and the facts checks need.

    `dp_master`: the node index `--data-parallel-address` resolves to (None: not given or
    not resolvable). `api_servers`: API ports from `api_port` up (external DP runs one
    server per local DP rank). `hccn_conf_mounted` / `tls_switch` are host facts the
    upstream configs do not carry (None: unknown, not checked)."""

    index: int
    role: Role
    npus: int
    tp_size: int
    dp_size: int
    dp_size_local: int
    dp_rank_start: int
    kv: KvTransfer
    where: Mapping[str, Where]
    api_port: int | None = None
    api_servers: int = 1
    dp_rpc_port: int | None = None
    dp_address: str | None = None
    dp_master: int | None = None
    external_dp: bool = False
    headless: bool = False
    prefix_caching: bool = True         # vLLM's default unless --no-enable-prefix-caching
    num_speculative_tokens: int | None = None
    recompute_scheduler: bool = False
    hccn_conf_mounted: bool | None = None
    tls_switch: tuple[int, ...] | None = None

    def at(self, name: str) -> Where:
        """Where field NAME was read, else where the node starts."""
        return self.where.get(name) or self.where["node"]

    @property
    def dp_ranks(self) -> range:
        return range(self.dp_rank_start, self.dp_rank_start + self.dp_size_local)

    @property
    def chips_used(self) -> int:
        return self.dp_size_local * self.tp_size

    @property
    def kv_ports(self) -> range:
        """The handshake ports Mooncake binds on this node: kv_port + dp_rank × tp + tp_rank
        for each global DP rank it runs (mooncake_connector.py, `side_channel_port`)."""
        first = self.kv.kv_port + self.dp_rank_start * self.tp_size
        return range(first, first + self.chips_used)

    @property
    def engine_ids(self) -> tuple[str, ...]:
        """The engine ids vLLM registers: `<engine_id>_dp<rank>` per DP rank when DP > 1."""
        if self.kv.engine_id is None:
            return ()
        if self.dp_size == 1:
            return (self.kv.engine_id,)
        return tuple(f"{self.kv.engine_id}_dp{rank}" for rank in self.dp_ranks)


@dataclass(frozen=True)
class Instance:
    """One DP group of a side: the nodes that together run DP ranks [0, dp_size)."""

    role: Role
    nodes: tuple[NodeLaunch, ...]

    @property
    def master(self) -> NodeLaunch:
        return self.nodes[0]

    @property
    def dp_size(self) -> int:
        return self.master.dp_size

    @property
    def tp_size(self) -> int:
        return self.master.tp_size


@dataclass(frozen=True)
class PdPart:
    role: Role
    nodes: tuple[NodeLaunch, ...]
    instances: tuple[Instance, ...]


@dataclass(frozen=True)
class ProxyBackend:
    """One `--prefiller-hosts`/`--decoder-hosts` entry with its port; `node`: the node the
    host resolves to (None: not resolvable)."""

    role: Role
    host: str
    port: int
    node: int | None
    where: Where


@dataclass(frozen=True)
class ProxySpec:
    node: int
    port: int | None
    script: str
    where: Where
    # as written in a recipe's proxy command; empty where a harness builds the list itself
    backends: tuple[ProxyBackend, ...] = ()


@dataclass(frozen=True)
class Listener:
    """A port another process of the deployment holds on a node (an inventory's gateway)."""

    node: int
    owner: str
    port: int
    where: Where
    field: str


@dataclass(frozen=True)
class PdLayout:
    """A PD unit: every node of both sides, the proxy, and where the layout was read."""

    file: str
    model: str
    npu_per_node: int
    nodes: tuple[NodeLaunch, ...]
    where: Mapping[str, Where] = field(default_factory=dict)
    proxy: ProxySpec | None = None
    exporter_port: int | None = None
    listeners: tuple[Listener, ...] = ()

    @property
    def hybrid_model(self) -> bool:
        return bool(_HYBRID_MODEL.search(self.model))

    @property
    def connector(self) -> str:
        return self.nodes[0].kv.connector if self.nodes else ""

    def part(self, role: Role) -> PdPart:
        nodes = tuple(n for n in self.nodes if n.role == role)
        return PdPart(role, nodes, group_instances(nodes))

    @property
    def prefill(self) -> PdPart:
        return self.part("prefill")

    @property
    def decode(self) -> PdPart:
        return self.part("decode")

    def instances(self) -> tuple[Instance, ...]:
        return self.prefill.instances + self.decode.instances


def group_instances(nodes: tuple[NodeLaunch, ...]) -> tuple[Instance, ...]:
    """Consecutive nodes of one side form an instance until their local DP ranks add up to
    the first node's dp_size (how the upstream configs and recipes list them). Grouping by
    counts, not by dp_rank_start, keeps a wrong start rank a finding instead of a new
    instance."""
    groups: list[Instance] = []
    current: list[NodeLaunch] = []
    ranks = 0
    for node in nodes:
        current.append(node)
        ranks += node.dp_size_local
        if ranks >= current[0].dp_size:
            groups.append(Instance(node.role, tuple(current)))
            current, ranks = [], 0
    if current:
        groups.append(Instance(current[0].role, tuple(current)))
    return tuple(groups)
