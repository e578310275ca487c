"""The resolved inventory: hosts in rank order, groups, and the cluster-wide sections."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.engine import EngineSpec
from ascendctl.inventory.model import (
    ClusterSpec, DeploySpec, ModelSpec, ServingSpec, SloSpec, SshSpec, VersionsSpec,
)
from ascendctl.inventory.yamlsrc import SourceMap


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

    @property
    def is_head(self) -> bool:
        return self.rank == 0


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

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def followers(self) -> tuple[Host, ...]:
        return self.hosts[1:]

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise InputError(f"no host named {name!r} (hosts: {', '.join(self.host_names)})",
                         file=str(self.path))

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
            raise InputError(f"pattern {pattern!r}: {term!r} matches no host or group "
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
        return {
            "inventory": str(self.path),
            "cluster": dump(self.cluster) | {"hbm_per_npu_gib": self.cluster.hbm_per_npu_gib},
            "model": dump(self.model),
            "serving": serving,
            "versions": dump(self.versions),
            "deploy": dump(self.deploy),
            "slo": dump(self.slo),
            "engine": dump(self.engine),
            "groups": {k: list(v) for k, v in sorted(self.groups.items())},
            "hosts": [
                {
                    "name": h.name, "address": h.address, "rank": h.rank, "ip": h.ip,
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
