"""The resolved inventory: hosts in rank order, groups, and the cluster-wide sections.

Several *serving groups* (replicas of the same model, docs/replicas.md) may share one
inventory: each has its own head (rank 0) and followers, ranks counted within the group.
`inv.group_view(name)` (or `inv.view_of(host)`) is the inventory as one group sees it:
`hosts`, `head`, `followers` and the groups `all`/`head`/`followers` are the group's,
everything else is shared. Renderers and deploy steps that think in one group take a
view; an inventory without serving groups is one group named `all` (its own view).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascendctl.errors import InputError
from ascendctl.inventory.container_safety import unsafe_uses
from ascendctl.inventory.engine import EngineSpec
from ascendctl.inventory.excerpt import excerpt
from ascendctl.inventory.model import (
    ClusterSpec, DeploySpec, ModelSpec, ServingSpec, SloSpec, SshSpec, VersionsSpec,
)
from ascendctl.inventory.yamlsrc import SourceMap

if TYPE_CHECKING:
    from ascendctl.inventory.pd import PdSpec

SINGLE_GROUP = "all"   # the serving group of an inventory that marks none


@dataclass(frozen=True)
class Host:
    name: str
    address: str                       # where SSH connects
    rank: int
    ip: str                            # HCCL_IF_IP / Gloo / data-parallel address
    nic: str | None                    # the NIC carrying `ip`; None = discover from facts
    device_ips: tuple[str, ...] | None  # RoCE IP per NPU; None = read /etc/hccn.conf
    ssh: SshSpec
    groups: tuple[str, ...]
    super_pod_id: int | None = None
    super_device_ids: tuple[int, ...] | None = None
    numa_node: int | None = None
    cpus: str | None = None
    env: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    custom: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    serving_group: str = SINGLE_GROUP   # the serving group (replica) this host belongs to
    pd_role: str | None = None          # prefill | decode in a PD inventory (inventory/pd.py)

    @property
    def is_head(self) -> bool:
        """The head of its serving group (rank 0 within the group)."""
        return self.rank == 0


@dataclass(frozen=True)
class ServingGroup:
    """One replica of the model: its hosts in rank order (the first is the head)."""

    name: str
    hosts: tuple[str, ...]

    @property
    def head(self) -> str:
        return self.hosts[0]


@dataclass(frozen=True)
class Inventory:
    path: Path
    cluster: ClusterSpec
    model: ModelSpec
    serving: ServingSpec
    versions: VersionsSpec
    deploy: DeploySpec
    slo: SloSpec
    hosts: tuple[Host, ...]            # sorted by rank
    groups: dict[str, tuple[str, ...]]  # group → host names (rank order), incl. all/head/followers
    source: SourceMap = field(compare=False, repr=False)
    custom: dict[str, Any] = field(default_factory=dict, compare=False)
    engine: EngineSpec = field(default_factory=EngineSpec)
    # the serving groups in inventory order (hosts are sorted by group, then rank);
    # empty only for inventories built by hand in tests: then one group of every host
    serving_groups: tuple[ServingGroup, ...] = ()
    gateway_name: str | None = None    # the host running the proxy (serving.proxy)
    pd: PdSpec | None = None           # prefill/decode disaggregation (inventory/pd.py)

    def __post_init__(self) -> None:
        if not self.serving_groups and self.hosts:
            object.__setattr__(self, "serving_groups", (
                ServingGroup(SINGLE_GROUP, tuple(h.name for h in self.hosts)),))

    @property
    def head(self) -> Host:
        """The head (rank 0) of the first serving group: where the cluster-wide deploy
        lock lives; in a group view, the group's head."""
        return self.hosts[0]

    @property
    def followers(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if not h.is_head)

    @property
    def heads(self) -> tuple[Host, ...]:
        """Every serving group's head, in group order."""
        return tuple(self.host(g.head) for g in self.serving_groups)

    @property
    def replicated(self) -> bool:
        """More than one serving group."""
        return len(self.serving_groups) > 1

    @property
    def group_size(self) -> int:
        """Nodes per serving group (every group has as many)."""
        return len(self.serving_groups[0].hosts) if self.serving_groups else len(self.hosts)

    @property
    def gateway(self) -> Host | None:
        """The host running the proxy, when serving.proxy is enabled."""
        if not self.serving.proxy.enabled:
            return None
        return self.host(self.gateway_name or self.serving_groups[0].head)

    def group(self, name: str) -> ServingGroup:
        for group in self.serving_groups:
            if group.name == name:
                return group
        raise InputError(f"no serving group named {excerpt(name)} (groups: "
                         f"{', '.join(g.name for g in self.serving_groups)})",
                         file=str(self.path))

    def group_of(self, host: Host | str) -> ServingGroup:
        name = host if isinstance(host, str) else host.name
        return self.group(self.host(name).serving_group)

    def group_view(self, name: str) -> "Inventory":
        """The inventory as serving group NAME sees it (itself when it is the only one)."""
        group = self.group(name)
        if len(self.serving_groups) == 1:
            return self
        members = set(group.hosts)
        hosts = tuple(h for h in self.hosts if h.name in members)
        groups = {g: tuple(n for n in names if n in members)
                  for g, names in self.groups.items()}
        groups["all"] = tuple(h.name for h in hosts)
        groups["head"] = (hosts[0].name,)
        groups["followers"] = tuple(h.name for h in hosts[1:])
        return dataclasses.replace(self, hosts=hosts, groups=groups,
                                   serving_groups=(group,))

    def view_of(self, host: Host | str) -> "Inventory":
        """The view of the serving group HOST belongs to."""
        return self.group_view(self.group_of(host).name)

    def group_views(self) -> list["Inventory"]:
        return [self.group_view(g.name) for g in self.serving_groups]

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise InputError(f"no host named {excerpt(name)} (hosts: {', '.join(self.host_names)})",
                         file=str(self.path))

    @property
    def unsafe_engine_options(self) -> tuple[str, ...]:
        """The unsafe container options and mounts the engine uses, each acknowledged in
        engine.allow_unsafe (the loader refuses the others): `privileged`, `mount:/etc`..."""
        return tuple(dict.fromkeys(use.name for use in unsafe_uses(self.engine,
                                                                   self.deploy.root)))

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def select(self, pattern: str | None) -> tuple[Host, ...]:
        """Hosts matching an Ansible-style pattern, in rank order.

        `all`, a group or host name, shell wildcards (`node*`), unions `a:b` (or `a,b`),
        intersections `a:&b` and exclusions `a:!b`.
        """
        if pattern is None or pattern.strip() in ("", "all", "*"):
            return self.hosts
        selected: set[str] = set()
        first = True
        for term in pattern.replace(",", ":").split(":"):
            term = term.strip()
            if not term:
                continue
            if term.startswith("&"):
                selected &= self._match_term(term[1:], pattern)
            elif term.startswith("!"):
                selected -= self._match_term(term[1:], pattern)
            else:
                selected |= self._match_term(term, pattern)
            first = False
        if first:
            return self.hosts
        return tuple(h for h in self.hosts if h.name in selected)

    def _match_term(self, term: str, pattern: str) -> set[str]:
        if term in self.groups:
            return set(self.groups[term])
        names = set(self.host_names)
        if term in names:
            return {term}
        matched = {n for n in names if fnmatch.fnmatchcase(n, term)}
        for group, members in self.groups.items():
            if fnmatch.fnmatchcase(group, term):
                matched |= set(members)
        if not matched:
            raise InputError(f"pattern {excerpt(pattern)}: {excerpt(term)} matches no host or group "
                             f"(groups: {', '.join(sorted(self.groups))})")
        return matched

    def public_dict(self, host: str | None = None) -> dict[str, Any]:
        """Resolved values for display: secrets appear only as their references."""
        def dump(section) -> dict[str, Any]:
            return section.model_dump(mode="json")

        serving = dump(self.serving)
        if self.serving.api_key is not None:
            serving["api_key"] = f"<secret from {self.serving.api_key.describe()}>"
        hosts = [h for h in self.hosts if host is None or h.name == host]
        if host is not None and not hosts:
            self.host(host)  # raises with the list of names
        shown: dict[str, Any] = {
            "inventory": str(self.path),
            "cluster": dump(self.cluster) | {"hbm_per_npu_gib": self.cluster.hbm_per_npu_gib},
            "model": dump(self.model),
            "serving": serving,
            "versions": dump(self.versions),
            "deploy": dump(self.deploy),
            "slo": dump(self.slo),
            "engine": dump(self.engine),
            "groups": {k: list(v) for k, v in sorted(self.groups.items())},
            "serving_groups": {g.name: list(g.hosts) for g in self.serving_groups},
            "gateway": self.gateway.name if self.gateway else None,
            "hosts": [
                {
                    "name": h.name, "address": h.address, "rank": h.rank,
                    "serving_group": h.serving_group, "ip": h.ip,
                    "nic": h.nic, "device_ips": list(h.device_ips) if h.device_ips else None,
                    "groups": list(h.groups), "ssh": dump(h.ssh),
                    "super_pod_id": h.super_pod_id,
                    "super_device_ids": list(h.super_device_ids) if h.super_device_ids else None,
                    "numa_node": h.numa_node, "cpus": h.cpus,
                    "env": h.env, "custom": h.custom,
                }
                for h in hosts
            ],
            "custom": self.custom,
        }
        if self.pd is not None:          # a PD inventory: the section and each host's side
            shown["pd"] = dump(self.pd)
            for shown_host, h in zip(shown["hosts"], hosts):
                shown_host["pd_role"] = h.pd_role
        return shown
