"""`Expectations` from the inventory: what every node must look like before a deploy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascendctl.checks import Expectations, NodeExpectation, PinnedVersions
from ascendctl.engine.preflight import engine_expectation
from ascendctl.inventory import Host, Inventory
from ascendctl.preflight.launch import launch_ports, ports_bound, socket_nic
from ascendctl.preflight.model_size import GIB, model_source_bytes
from ascendctl.render.timeouts import start_spread_s

FULL_STACK = ("torch", "torch_npu", "vllm", "vllm_ascend")
PY_PACKAGES = ("torch", "torch_npu", "vllm", "vllm_ascend")
DEFAULT_CLOCK_TOLERANCE_S = 1.0
DEFAULT_DISK_HEADROOM_GIB = 1.0


@dataclass(frozen=True)
class PreflightOptions:
    """Knobs the inventory does not hold (CLI options of `ascendctl preflight`)."""

    clock_tolerance_s: float = DEFAULT_CLOCK_TOLERANCE_S
    disk_headroom_gib: float = DEFAULT_DISK_HEADROOM_GIB  # releases, logs, helper, caches
    allow_own_units: bool = True        # re-deploy: our running engine may hold NPUs/ports


@dataclass(frozen=True)
class OwnHolders:
    """What our own units hold on one node (see owners.py): allowed on a re-deploy."""

    npu_pids: frozenset[int] = frozenset()
    ports: Mapping[int, str] = field(default_factory=dict)   # port -> "unit (pid N)"


def chip_expectation(inv: Inventory) -> tuple[str, int, int]:
    """(chip as the npu.chip check takes it, cards per node, dies per card). The inventory
    counts A3 dies (16 per node); npu-smi counts 8 cards of 2 dies."""
    cluster = inv.cluster
    if cluster.is_a3:
        return "910_93", max(1, cluster.npus_per_node // 2), 2
    return cluster.chip, cluster.npus_per_node, 1


def required_packages(inv: Inventory) -> tuple[str, ...]:
    """The Python packages every node must have.

    The full NPU stack (torch, torch_npu, vllm, vllm-ascend) unless the inventory's
    `versions` section pins versions but not vllm_ascend: then it declares a stack
    without vllm-ascend (the lab's vLLM CPU build), and only vllm plus the pinned Python
    packages are required.
    """
    pins = inv.versions
    pinned_any = any(getattr(pins, name) for name in type(pins).model_fields)
    if pins.vllm_ascend or not pinned_any:
        return FULL_STACK
    return tuple(["vllm"] + [p for p in PY_PACKAGES if p != "vllm" and getattr(pins, p)])


def node_expectation(inv: Inventory, host: Host, own: OwnHolders | None) -> NodeExpectation:
    nic, address = socket_nic(inv, host)
    held = own.ports if own else {}
    ports = tuple(u.port for u in ports_bound(inv, host) if u.port not in held)
    s = inv.serving
    dp = s.mode == "dp"
    return NodeExpectation(
        name=host.name,
        device_ips=dict(enumerate(host.device_ips)) if host.device_ips else {},
        socket_ifname=nic, socket_ip=address, ports_free=ports,
        dp_start_rank=host.rank * s.dp_local if dp else None,
        dp_size_local=s.dp_local if dp else None,
        headless=(not host.is_head) if dp else None,
    )


def build_expectations(inv: Inventory, *, options: PreflightOptions | None = None,
                       own: Mapping[str, OwnHolders] | None = None,
                       model_bytes: int | None = None) -> Expectations:
    """Everything the checks compare against. `own` (per node) exempts what our own
    running units hold; `model_bytes` overrides the size measured under model.source."""
    options = options or PreflightOptions()
    own = own or {}
    chip, cards, dies = chip_expectation(inv)
    roce = inv.cluster.roce
    size = model_bytes if model_bytes is not None else model_source_bytes(inv)
    disk_path: str | None
    if inv.model.source is not None:
        # weights are pushed into the store under the deploy root
        disk_path, need = inv.deploy.root, (size or 0) + int(options.disk_headroom_gib * GIB)
    else:
        # weights already on every node: only where they live matters (network storage)
        disk_path, need = inv.model.path, None
    v = inv.versions
    head = inv.head
    return Expectations(
        nodes={h.name: node_expectation(inv, h, own.get(h.name)) for h in inv.hosts},
        head=head.name,
        head_address=head.ip,
        launch_ports=tuple(u.port for u in launch_ports(inv)),
        chip=chip,
        npus_per_node=cards,
        chips_per_npu=dies,
        versions=PinnedVersions(driver=v.driver, firmware=v.firmware, cann=v.cann,
                                torch=v.torch, torch_npu=v.torch_npu, vllm=v.vllm,
                                vllm_ascend=v.vllm_ascend, python=v.python),
        required_packages=required_packages(inv),
        roce_mtu=roce.mtu,
        roce_tls=roce.tls,
        roce_netmask=roce.netmask,
        roce_gateway=roce.gateway,
        model_path=disk_path,
        model_bytes=need,
        clock_skew_tolerance_s=options.clock_tolerance_s,
        allowed_npu_pids=frozenset().union(*(o.npu_pids for o in own.values())),
        path_mtu=roce.mtu,
        dp_size=inv.serving.data_parallel_size if inv.serving.mode == "dp" else None,
        hccl_connect_timeout_s=inv.serving.hccl_connect_timeout,
        rank_start_budget_s=start_spread_s(inv) if len(inv.hosts) > 1 else None,
        engine=engine_expectation(inv, allow_own=options.allow_own_units),
    )
