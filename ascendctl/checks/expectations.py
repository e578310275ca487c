"""`Expectations`: what the inventory says the cluster should look like.

A plain dataclass the lead builds from the inventory. Every field is optional in the
sense that a check whose expectation is not given either skips or falls back to
comparing the nodes with each other (documented per check in docs/checks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ascendctl.engine.expectation import EngineExpectation


@dataclass(frozen=True)
class PinnedVersions:
    """Versions the inventory pins; None = not pinned. Prefix match: `24.1` pins 24.1.x."""

    driver: str | None = None
    firmware: str | None = None
    cann: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    vllm: str | None = None
    vllm_ascend: str | None = None
    python: str | None = None

    def items(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in vars(self).items() if v)


@dataclass(frozen=True)
class NodeExpectation:
    name: str
    device_ips: Mapping[int, str] = field(default_factory=dict)  # device id -> RoCE IP
    socket_ifname: str | None = None     # HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME
    socket_ip: str | None = None         # HCCL_IF_IP: the address that NIC must carry
    ports_free: tuple[int, ...] = ()     # ports the launch mode binds on this node
    dp_start_rank: int | None = None     # --data-parallel-start-rank
    dp_size_local: int | None = None     # --data-parallel-size-local
    headless: bool | None = None         # --headless


@dataclass(frozen=True)
class Expectations:
    nodes: Mapping[str, NodeExpectation] = field(default_factory=dict)
    head: str | None = None              # node name of rank 0 / the API server
    head_address: str | None = None      # the address followers connect to (master/DP address)
    launch_ports: tuple[int, ...] = ()   # ports followers must reach on the head
    chip: str | None = None              # `910B3` (exact model) or a family: `910B`, `910_93`
    npus_per_node: int = 8               # cards as npu-smi counts them (A3: 8 cards, 16 dies)
    chips_per_npu: int = 1               # 2 on A3
    versions: PinnedVersions = field(default_factory=PinnedVersions)
    required_packages: tuple[str, ...] = ("torch", "torch_npu", "vllm", "vllm_ascend")
    roce_mtu: int | None = None          # None: MTU must only be uniform across the cluster
    roce_tls: bool | None = None         # None: TLS must only be uniform across the cluster
    roce_netmask: str | None = None
    roce_gateway: str | None = None
    model_path: str | None = None
    model_bytes: int | None = None
    disk_margin: float = 1.05            # free space needed = model_bytes * margin
    min_free_hbm_mb: int | None = None   # per NPU; default: capacity - hbm_idle_used_mb
    hbm_idle_used_mb: int = 6144         # what an idle 910B shows used (~3.3-4.2 GB seen)
    clock_skew_tolerance_s: float = 1.0
    allowed_npu_pids: frozenset[int] = frozenset()     # our own running engine (re-deploy)
    allowed_port_owners: tuple[str, ...] = ()          # process names allowed to hold ports_free
    path_mtu: int | None = None          # DF-ping size the gather used (None: not probed)
    dp_size: int | None = None           # --data-parallel-size
    hccl_connect_timeout_s: int | None = None
    rank_start_budget_s: int | None = None  # worst-case gap between the first and last rank start
    engine: EngineExpectation = field(default_factory=EngineExpectation)

    def node(self, name: str) -> NodeExpectation:
        return self.nodes.get(name) or NodeExpectation(name=name)

    @property
    def roce_ports(self) -> int:
        return self.npus_per_node * self.chips_per_npu
