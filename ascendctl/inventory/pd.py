"""The inventory's `pd:` section: a serving group disaggregated into prefill and decode.

Each serving group (docs/replicas.md) of a PD inventory is one PD unit: its hosts are split
into a prefill part and a decode part by `pd.prefill.hosts` / `pd.decode.hosts` (inventory
groups or patterns, as `--limit` takes them; by default the groups `prefill` and `decode`).
Each part is one vLLM data-parallel group of its own (`serving.mode: dp`), with the part's
own parallel sizes and the `serving` values it overrides. Several units are several
serving groups: the replica concept is the inventory's own.

The cross-node rules (ascendctl/pd/rules.py) and the derived kv_port / engine_id live in
`ascendctl.pd.inventory`, above this package.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field, field_validator, model_validator

from ascendctl.errors import InputError
from ascendctl.inventory import validators as check
from ascendctl.inventory.hosts import Host, Inventory, ServingGroup
from ascendctl.inventory.model import EngineArgsSection, Section, ServingSpec

if TYPE_CHECKING:
    from ascendctl.inventory.yamlsrc import YamlPath

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, ...] = ("prefill", "decode")

# vllm-ascend v0.25.1rc1 (vllm_ascend/distributed/kv_transfer/__init__.py registers them);
# NixlConnector and SharedStorageConnector (renamed ExampleConnector in later vLLM) are
# vLLM's own, for an engine without NPUs (the lab's CPU engine).
MOONCAKE_CONNECTORS = ("MooncakeConnectorV1", "MooncakeLayerwiseConnector")
STORAGE_CONNECTORS = ("SharedStorageConnector", "ExampleConnector")
Connector = Literal["MooncakeConnectorV1", "MooncakeLayerwiseConnector", "NixlConnector",
                    "SharedStorageConnector", "ExampleConnector"]

_HOST_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]:,!&-]{1,200}")


def _host_pattern(value: str) -> str:
    return check.fullmatch(_HOST_PATTERN, value, "must be a group, host name or pattern (letters, "
                           "digits, '.', '_', '-', wildcards and ':' '!' '&' ',')")


# `pd.<side>.hosts`: a group, host name or pattern, as --limit takes them
HostPattern = Annotated[str, AfterValidator(_host_pattern)]
EngineId = Annotated[str, AfterValidator(check.name)]
AbsolutePath = Annotated[str, AfterValidator(check.absolute_path)]

# the serving fields a part may set for itself (the rest are the unit's)
ROLE_SERVING_FIELDS = (
    "tensor_parallel_size", "data_parallel_size", "data_parallel_size_local",
    "api_server_count", "port", "data_parallel_rpc_port", "max_num_seqs",
    "max_num_batched_tokens", "gpu_memory_utilization", "enforce_eager",
    "enable_prefix_caching", "speculative_config", "compilation_config", "additional_config",
)


def _serving_bounds(name: str, default: Any = None) -> Any:
    """A side's field for serving field NAME: ServingSpec's bounds on it, and DEFAULT (None:
    the unit's value; `...`: the side must set it)."""
    bounds = {key: getattr(limit, key) for limit in ServingSpec.model_fields[name].metadata
              for key in ("gt", "ge", "lt", "le") if hasattr(limit, key)}
    return Field(default, **bounds)


class PdRoleSpec(EngineArgsSection):
    """One side of a PD unit: its hosts, its layout, what it sets differently."""

    hosts: Optional[HostPattern] = None  # default: the group named as the role
    tensor_parallel_size: int = _serving_bounds("tensor_parallel_size", ...)
    data_parallel_size: int = _serving_bounds("data_parallel_size", ...)
    data_parallel_size_local: Optional[int] = _serving_bounds("data_parallel_size_local")
    api_server_count: Optional[int] = _serving_bounds("api_server_count")
    port: Optional[int] = _serving_bounds("port")
    data_parallel_rpc_port: Optional[int] = _serving_bounds("data_parallel_rpc_port")
    max_num_seqs: Optional[int] = _serving_bounds("max_num_seqs")
    max_num_batched_tokens: Optional[int] = _serving_bounds("max_num_batched_tokens")
    gpu_memory_utilization: Optional[float] = _serving_bounds("gpu_memory_utilization")
    enforce_eager: Optional[bool] = None
    enable_prefix_caching: Optional[bool] = None
    speculative_config: Optional[dict[str, Any]] = None
    compilation_config: Optional[dict[str, Any]] = None
    additional_config: Optional[dict[str, Any]] = None
    extra_args: list[str] = []           # after serving.extra_args
    env: dict[str, Any] = {}             # over serving.env
    kv_port: Optional[int] = Field(default=None, ge=1, le=65535)   # default: derived
    engine_id: Optional[EngineId] = None     # default: derived, one per node

    @property
    def dp_local(self) -> int:
        return self.data_parallel_size_local or self.data_parallel_size


# vllm-router (PyPI `vllm-router`, the vLLM project's router): its `--vllm-pd-disaggregation`
# mode sends each request to prefill with max_tokens 1, then to decode (the P-first flow of
# MooncakeConnectorV1, NixlConnector and the storage connectors).
Executable = Annotated[str, AfterValidator(check.executable)]


class PdRouterSpec(Section):
    """`pd.router`: the PD-aware router of each unit, on the unit's first prefill node; the
    gateway balances over the units' routers."""

    port: int = Field(default=8100, ge=1, le=65535)
    executable: Executable = "vllm-router"
    policy: Literal["round_robin", "random", "power_of_two", "cache_aware",
                    "consistent_hash"] = "round_robin"
    extra_args: list[str] = []           # after ascendctl's own flags

    @property
    def metrics_port(self) -> int:
        """vllm-router's Prometheus endpoint (127.0.0.1), next to its API port."""
        return self.port + 1

    @field_validator("extra_args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        for arg in value:
            check.text(arg)
        return value


class PdSpec(Section):
    """`pd:` under all.vars: the connector and the two sides of every serving group."""

    connector: Connector = "MooncakeConnectorV1"
    kv_buffer_device: Optional[Literal["npu", "cpu"]] = None   # default: the connector's
    shared_storage_path: Optional[AbsolutePath] = None   # SharedStorageConnector / ExampleConnector
    prefill: PdRoleSpec
    decode: PdRoleSpec
    router: PdRouterSpec = PdRouterSpec()

    @model_validator(mode="after")
    def _storage(self) -> "PdSpec":
        if self.connector in STORAGE_CONNECTORS and self.shared_storage_path is None:
            raise ValueError(f"{self.connector} needs shared_storage_path (the directory "
                             "both sides exchange KV through)")
        if self.connector not in STORAGE_CONNECTORS and self.shared_storage_path is not None:
            raise ValueError(f"shared_storage_path applies to {' and '.join(STORAGE_CONNECTORS)}"
                             f", not {self.connector}")
        return self

    def role(self, role: Role) -> PdRoleSpec:
        return self.prefill if role == "prefill" else self.decode


def role_serving(serving: ServingSpec, spec: PdRoleSpec) -> ServingSpec:
    """The serving section as one side runs it: the side's own values over the unit's."""
    update: dict[str, Any] = {name: getattr(spec, name) for name in ROLE_SERVING_FIELDS
                              if getattr(spec, name) is not None}
    update["data_parallel_size_local"] = spec.dp_local
    update["extra_args"] = list(serving.extra_args) + list(spec.extra_args)
    update["env"] = {**serving.env, **spec.env}
    return serving.model_copy(update=update)


def role_hosts(inv: Inventory, unit: str, role: Role) -> tuple[Host, ...]:
    """The hosts of one side of serving group UNIT, in rank order."""
    return tuple(inv.host(name) for name in inv.group(unit).hosts
                 if inv.host(name).pd_role == role)


def role_view(inv: Inventory, unit: str, role: Role) -> Inventory:
    """One side of a PD unit as a cluster of its own: its hosts ranked 0.. (its first host
    is its DP master and API server), its serving values."""
    if inv.pd is None:
        raise ValueError("not a PD inventory")
    hosts = tuple(dataclasses.replace(h, rank=index)
                  for index, h in enumerate(role_hosts(inv, unit, role)))
    names = tuple(h.name for h in hosts)
    groups = {g: tuple(n for n in members if n in names) for g, members in inv.groups.items()}
    groups["all"] = names
    groups["head"] = names[:1]
    groups["followers"] = names[1:]
    return dataclasses.replace(inv, hosts=hosts, groups=groups,
                               serving_groups=(ServingGroup(unit, names),),
                               serving=role_serving(inv.serving, inv.pd.role(role)))


def side_view(inv: Inventory, host: Host) -> Inventory:
    """The side of its PD unit HOST is on (role_view)."""
    role: Role = "decode" if host.pd_role == "decode" else "prefill"
    if host.pd_role not in ROLES:
        raise ValueError(f"{host.name} is on no PD side")
    return role_view(inv, host.serving_group, role)


def gang_view(inv: Inventory, unit: str) -> Inventory:
    """Serving group UNIT as its supervisor keeps it: in a PD inventory both sides, prefill
    first, ranked 0.. across the unit (the first prefill node is the unit's head: its
    router and its supervisor run there); otherwise the group's own view."""
    if inv.pd is None:
        return inv.group_view(unit)
    ordered = role_hosts(inv, unit, "prefill") + role_hosts(inv, unit, "decode")
    hosts = tuple(dataclasses.replace(h, rank=index) for index, h in enumerate(ordered))
    names = tuple(h.name for h in hosts)
    groups = {g: tuple(n for n in names if n in members) for g, members in inv.groups.items()}
    groups.update({"all": names, "head": names[:1], "followers": names[1:]})
    return dataclasses.replace(inv, hosts=hosts, groups=groups,
                               serving_groups=(ServingGroup(unit, names),))


def router_host(inv: Inventory, unit: str) -> Host:
    """Where UNIT's router and supervisor run: its first prefill node (the unit's head)."""
    return role_hosts(inv, unit, "prefill")[0]


def is_router_host(inv: Inventory, host: Host) -> bool:
    """HOST runs its PD unit's router."""
    return inv.pd is not None and host.pd_role == "prefill" and \
        router_host(inv, host.serving_group).name == host.name


def entry_port(inv: Inventory) -> int:
    """The port a serving group answers the API on at its head: the PD unit's router, or
    the engine's API server."""
    return inv.pd.router.port if inv.pd is not None else inv.serving.port


def launch_views(inv: Inventory) -> list[Inventory]:
    """What is launched as one vLLM deployment each: every serving group, or, in a PD
    inventory, each side of every serving group."""
    if inv.pd is None:
        return inv.group_views()
    return [role_view(inv, group.name, role) for group in inv.serving_groups for role in ROLES]


# ---- the loader's checks ----

Fail = Callable[[str, "YamlPath"], Exception]
PD_PATH: YamlPath = ("all", "vars", "pd")
SERVING_PATH: YamlPath = ("all", "vars", "serving")


def resolve_pd(inv: Inventory, fail: Fail, written: Any,
               host_path: Callable[[Host], YamlPath]) -> Inventory:
    """INV with every host's side set (`Host.pd_role`), after the checks a launch needs
    before any rule can be read: each host of each unit on exactly one side, each side a
    whole DP group on its nodes. FAIL(message, path) names the inventory's line; WRITTEN
    holds the paths the file spells out."""
    pd = inv.pd
    assert pd is not None
    if inv.serving.mode != "dp":
        raise fail(f"a PD inventory runs each side as a data-parallel group: set "
                   f"serving.mode: dp (not {inv.serving.mode})",
                   _first_written(written, SERVING_PATH + ("mode",), PD_PATH))
    members: dict[Role, set[str]] = {}
    for role in ROLES:
        pattern = pd.role(role).hosts or role
        path = PD_PATH + (role, "hosts") if pd.role(role).hosts else PD_PATH + (role,)
        try:
            members[role] = {h.name for h in inv.select(pattern)}
        except InputError as err:
            raise fail(err.reason, path) from None
    hosts = []
    for host in inv.hosts:
        sides = [role for role in ROLES if host.name in members[role]]
        if len(sides) != 1:
            where = "both sides" if sides else "neither side"
            raise fail(f"host {host.name} of serving group {host.serving_group} is on "
                       f"{where}: list it in exactly one of pd.prefill.hosts "
                       f"({pd.prefill.hosts or 'prefill'}) and pd.decode.hosts "
                       f"({pd.decode.hosts or 'decode'})", host_path(host))
        hosts.append(dataclasses.replace(host, pd_role=sides[0]))
    resolved = dataclasses.replace(inv, hosts=tuple(hosts))
    for group in resolved.serving_groups:
        head = resolved.host(group.head)
        if head.pd_role != "prefill":
            # the deploy starts and probes a group from its rank 0: the unit's router
            # and supervisor run on its first prefill node
            raise fail(f"rank 0 of serving group {group.name} is {head.name}, a decode host: "
                       "give rank 0 to a prefill host (the unit's router and supervisor "
                       "run there)", host_path(head))
        for role in ROLES:
            _check_side(resolved, group.name, role, fail, written)
    return resolved


def _first_written(written: Any, *paths: YamlPath) -> YamlPath:
    return next((p for p in paths if p in written), paths[-1])


def _check_side(inv: Inventory, unit: str, role: Role, fail: Fail, written: Any) -> None:
    assert inv.pd is not None
    spec = inv.pd.role(role)
    side = PD_PATH + (role,)
    nodes = len(role_hosts(inv, unit, role))
    if nodes == 0:
        raise fail(f"serving group {unit} has no {role} host", side)
    dp, local, tp = spec.data_parallel_size, spec.dp_local, spec.tensor_parallel_size
    pp = inv.serving.pipeline_parallel_size
    if dp % local:
        raise fail(f"data_parallel_size {dp} is not a multiple of data_parallel_size_local "
                   f"{local}", side + ("data_parallel_size_local",))
    if dp // local != nodes:
        raise fail(f"data_parallel_size {dp} / data_parallel_size_local {local} = "
                   f"{dp // local} {role} node(s), but serving group {unit} has {nodes}",
                   _first_written(written, side + ("data_parallel_size_local",),
                                  side + ("data_parallel_size",)))
    if tp * pp * local > inv.cluster.npus_per_node:
        raise fail(f"tensor {tp} × pipeline {pp} × local data parallel {local} = "
                   f"{tp * pp * local} NPUs per {role} node, but nodes have "
                   f"{inv.cluster.npus_per_node}", side + ("tensor_parallel_size",))
