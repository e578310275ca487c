"""Read an inventory file into a validated `Inventory`, or fail with file, line and field.

Nothing here touches the network: an inventory is fully checked before any host is
contacted.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascendctl_runtime.nodeutil import host_port

from ascendctl.errors import InputError
from ascendctl.inventory.engine import EngineSpec, check_engine_inventory
from ascendctl.inventory.excerpt import bounded, excerpt
from ascendctl.inventory.hosts import SINGLE_GROUP, Host, Inventory, ServingGroup
from ascendctl.inventory.inputfile import non_regular, shown_path
from ascendctl.inventory.known_hosts import check_known_hosts_file, known_hosts_path
from ascendctl.inventory.pd import PdSpec, resolve_pd
from ascendctl.inventory.quality import check_quality_inventory
from ascendctl.inventory.model import (
    ClusterSpec, DeploySpec, HostSpec, ModelSpec, NAME_RE, Section, ServingSpec, SloSpec,
    SshSpec, VersionsSpec,
)
from ascendctl.inventory.secretscan import find_secret
from ascendctl.inventory.yamlsrc import (
    MAX_WRITTEN_VALUES, SourceMap, YamlPath, dotted, load_yaml_with_lines,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

CLUSTER_SECTIONS: dict[str, type[BaseModel]] = {
    "cluster": ClusterSpec,
    "model": ModelSpec,
    "serving": ServingSpec,
    "versions": VersionsSpec,
    "deploy": DeploySpec,
    "slo": SloSpec,
    "engine": EngineSpec,
    "pd": PdSpec,
}
# sections that are None when the file leaves them out
OPTIONAL_SECTIONS = ("pd",)
GROUP_VAR_KEYS = ("ssh", "custom")
ALL_VAR_KEYS = tuple(CLUSTER_SECTIONS) + GROUP_VAR_KEYS
# `serving_group: true` in a child group's vars: the group is one replica of the model
SERVING_GROUP_KEY = "serving_group"
CHILD_VAR_KEYS = GROUP_VAR_KEYS + (SERVING_GROUP_KEY,)
GROUP_KEYS = ("hosts", "vars", "children")
# Environment variables that override every host's ssh settings (documented in --help).
SSH_ENV_OVERRIDES = {"private_key": "ASCENDCTL_SSH_KEY",
                     "known_hosts": "ASCENDCTL_KNOWN_HOSTS"}


def load_inventory(path: str | os.PathLike[str], *, check_files: bool = True) -> Inventory:
    """Load and validate the file, section by section. `check_files=False` skips
    controller-side file checks (key files). The engine section is validated by the
    registered engine kinds: commands load through `ascendctl.load.load_inventory`, which
    registers them and checks the options against the pinned release too."""
    path = Path(path)
    data, source = load_yaml_with_lines(
        path, what="inventory", decimal_numbers=True,
        too_many=f"more than {MAX_WRITTEN_VALUES} values (keys, values and list items): "
                 "larger than any inventory needs")
    return _Builder(path, source).build(data, check_files=check_files)


class _Builder:
    def __init__(self, path: Path, source: SourceMap):
        self.path = path
        self.source = source
        self.host_defs: dict[str, tuple[YamlPath, dict[str, Any]]] = {}
        self.host_groups: dict[str, list[str]] = {}
        self.host_ssh_layers: dict[str, list[tuple[YamlPath, dict[str, Any]]]] = {}
        self.host_custom_layers: dict[str, list[dict[str, Any]]] = {}
        self.groups: dict[str, list[str]] = {}
        self.group_lines: dict[str, YamlPath] = {}
        self.all_vars: dict[str, Any] = {}
        self.serving_groups: list[str] = []       # marked groups, in inventory order

    # -- errors --------------------------------------------------------------------------

    def fail(self, message: str, path: YamlPath) -> InputError:
        return InputError(message, file=str(self.path), line=self.source.line_of(path),
                          field=dotted(path) or None)

    # -- structure -----------------------------------------------------------------------

    def build(self, data: Any, *, check_files: bool) -> Inventory:
        if data is None:
            raise InputError("the inventory is empty", file=str(self.path))
        if not isinstance(data, dict):
            raise self.fail("the top level must be a mapping of groups (start with `all:`)", ())
        # before anything else, so that no later message can echo a pasted secret
        secret = find_secret(data)
        if secret is not None:
            where, kind = secret
            raise self.fail(f"{kind} is not allowed in the inventory (the value is not "
                            "shown); give the API key as serving.api_key: {env: VAR} or "
                            "{file: /path/0600-file}", where)
        for name, group in data.items():
            self.walk_group(str(name), group, (name,), parents=[], ssh_layers=[],
                            custom_layers=[])
        if not self.host_defs:
            raise self.fail("no hosts: add them under all.children.<group>.hosts", ())
        sections = self.cluster_sections()
        hosts = self.resolve_hosts(sections["cluster"])
        serving_groups = self.resolve_serving_groups(hosts)
        hosts = self.in_group_order(hosts, serving_groups)
        self.check_semantics(hosts, sections, serving_groups)
        gateway = self.resolve_gateway(hosts, sections["serving"], serving_groups)
        check_engine_inventory(sections, self.fail, self.source.lines)
        check_quality_inventory(sections, self.fail)
        if check_files:
            self.check_controller_files(hosts)
        groups = self.finish_groups(hosts)
        inventory = Inventory(
            path=self.path, cluster=sections["cluster"], model=sections["model"],
            serving=sections["serving"], versions=sections["versions"],
            deploy=sections["deploy"], slo=sections["slo"], hosts=tuple(hosts),
            groups=groups, source=self.source, engine=sections["engine"],
            custom=dict(self.all_vars.get("custom") or {}),
            serving_groups=serving_groups, gateway_name=gateway, pd=sections["pd"],
        )
        if inventory.pd is not None:
            inventory = resolve_pd(inventory, self.fail, self.source.lines, self.host_path)
        return inventory

    def walk_group(self, name: str, group: Any, path: YamlPath, parents: list[str],
                   ssh_layers: list[tuple[YamlPath, dict[str, Any]]],
                   custom_layers: list[dict[str, Any]],
                   serving_parent: str | None = None) -> None:
        if not NAME_RE.fullmatch(name):
            raise self.fail(f"group name {excerpt(name)}: use letters, digits, '.', '_' or '-'", path)
        if name in ("head", "followers"):
            raise self.fail(f"group name {excerpt(name)} is reserved (ascendctl defines it from the "
                            "ranks)", path)
        if name in self.group_lines and group:
            raise self.fail(f"group {name!r} is defined twice (first on line "
                            f"{self.source.line_of(self.group_lines[name])})", path)
        self.group_lines.setdefault(name, path)
        self.groups.setdefault(name, [])
        if group is None:
            return
        if not isinstance(group, dict):
            raise self.fail("a group must be a mapping with hosts, vars and/or children", path)
        for key in group:
            if key not in GROUP_KEYS:
                raise self.fail(self.unknown_key_message(key, GROUP_KEYS), path + (key,))
        group_vars = group.get("vars") or {}
        if not isinstance(group_vars, dict):
            raise self.fail("vars must be a mapping", path + ("vars",))
        top = len(path) == 1
        allowed = ALL_VAR_KEYS if path == ("all",) else GROUP_VAR_KEYS if top \
            else CHILD_VAR_KEYS
        for key in group_vars:
            if key not in allowed:
                if key in CLUSTER_SECTIONS:
                    raise self.fail(f"{key} is cluster-wide: set it under all.vars",
                                    path + ("vars", key))
                if key == SERVING_GROUP_KEY:
                    raise self.fail("serving_group marks a child group (all.children.<group>."
                                    "vars), not the whole inventory", path + ("vars", key))
                raise self.fail(self.unknown_key_message(key, allowed), path + ("vars", key))
        if path == ("all",):
            self.all_vars = group_vars
        marked = group_vars.get(SERVING_GROUP_KEY, False)
        if not isinstance(marked, bool):
            raise self.fail("serving_group must be true or false",
                            path + ("vars", SERVING_GROUP_KEY))
        if marked:
            if serving_parent is not None:
                raise self.fail(f"serving group {name!r} is inside serving group "
                                f"{serving_parent!r}: a host serves in one group only",
                                path + ("vars", SERVING_GROUP_KEY))
            if name in ("all", "head", "followers"):
                raise self.fail(f"{name!r} cannot be a serving group", path)
            if name not in self.serving_groups:
                self.serving_groups.append(name)
            serving_parent = name
        if "ssh" in group_vars:
            ssh = group_vars["ssh"]
            if not isinstance(ssh, dict):
                raise self.fail("ssh must be a mapping", path + ("vars", "ssh"))
            ssh_layers = ssh_layers + [(path + ("vars", "ssh"), ssh)]
        if "custom" in group_vars:
            if not isinstance(group_vars["custom"], dict):
                raise self.fail("custom must be a mapping", path + ("vars", "custom"))
            custom_layers = custom_layers + [group_vars["custom"]]
        lineage = parents + [name]

        hosts = group.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise self.fail("hosts must be a mapping of host name to its variables",
                            path + ("hosts",))
        for host_name, host_vars in hosts.items():
            self.add_host(str(host_name), host_vars, path + ("hosts", host_name), lineage,
                          ssh_layers, custom_layers)

        children = group.get("children") or {}
        if not isinstance(children, dict):
            raise self.fail("children must be a mapping of group names", path + ("children",))
        for child_name, child in children.items():
            self.walk_group(str(child_name), child, path + ("children", child_name), lineage,
                            ssh_layers, custom_layers, serving_parent)

    def add_host(self, name: str, host_vars: Any, path: YamlPath, lineage: list[str],
                 ssh_layers: list[tuple[YamlPath, dict[str, Any]]],
                 custom_layers: list[dict[str, Any]]) -> None:
        if not NAME_RE.fullmatch(name):
            raise self.fail(f"host name {excerpt(name)}: use letters, digits, '.', '_' or '-'", path)
        if host_vars is not None and not isinstance(host_vars, dict):
            raise self.fail("host variables must be a mapping", path)
        for group in lineage:
            if name not in self.groups[group]:
                self.groups[group].append(name)
        self.host_groups.setdefault(name, [])
        for group in lineage:
            if group not in self.host_groups[name]:
                self.host_groups[name].append(group)
        self.host_ssh_layers.setdefault(name, []).extend(
            layer for layer in ssh_layers if layer not in self.host_ssh_layers.get(name, []))
        self.host_custom_layers.setdefault(name, []).extend(custom_layers)
        if host_vars:
            if name in self.host_defs:
                first = self.source.line_of(self.host_defs[name][0])
                raise self.fail(f"host {name!r} is defined twice (first on line {first}); "
                                "list it with its variables once and bare elsewhere", path)
            self.host_defs[name] = (path, host_vars)
        elif name not in self.host_defs:
            self.host_defs.setdefault(name, (path, {}))

    # -- sections ------------------------------------------------------------------------

    def cluster_sections(self) -> dict[str, Any]:
        sections: dict[str, Any] = {}
        base = ("all", "vars")
        for key, model in CLUSTER_SECTIONS.items():
            value = self.all_vars.get(key)
            if value is None and key in OPTIONAL_SECTIONS:
                sections[key] = None
                continue
            if value is None:
                if key in ("cluster", "model"):
                    raise self.fail(f"missing section `{key}` under all.vars", base)
                value = {}
            sections[key] = self.validate(model, value, base + (key,))
        return sections

    def validate(self, model: type[BaseModel], value: Any, path: YamlPath) -> Any:
        from pydantic import ValidationError

        if not isinstance(value, dict):
            raise self.fail(f"must be a mapping, not {type(value).__name__}", path)
        try:
            return model.model_validate(value)
        except ValidationError as err:
            raise self.pydantic_error(model, err, path) from None

    def pydantic_error(self, model: type[BaseModel], err: Any, path: YamlPath) -> InputError:
        errors = err.errors(include_url=False)
        first = errors[0]
        loc = tuple(part for part in first["loc"] if not _is_pydantic_branch(part))
        kind = first["type"]
        given = first.get("input")
        if kind == "extra_forbidden":
            message = self.unknown_key_message(loc[-1], _field_names(model, loc[:-1]))
        elif kind == "missing":
            message = "required field is missing"
        elif kind.startswith("literal_error"):
            message = f"{excerpt(given)} is not one of {first['ctx']['expected']}"
        else:
            message = bounded(first["msg"].removeprefix("Value error, "))
            shown = excerpt(given)
            if given is not None and not isinstance(given, (dict, list)) \
                    and shown not in message:
                message += f" (got {shown})"
        if isinstance(given, bool):
            message += " (YAML reads yes/no/on/off as booleans: quote the value)"
        elif isinstance(given, (int, float)) and kind == "string_type":
            message += self.number_hint(path + loc)
        elif isinstance(given, float) and kind == "int_type" and given.is_integer() \
                and isinstance((path + loc)[-1], str):
            message += f" (a whole number: write {(path + loc)[-1]}: {excerpt(int(given))})"
        elif isinstance(given, str) and kind in ("int_type", "float_type"):
            message += _text_number_hint(given, (path + loc)[-1])
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
        return self.fail(message, path + loc)

    def number_hint(self, path: YamlPath) -> str:
        """For text that YAML read as a number: what was written, quoted."""
        written = self.source.numbers.get(path)
        if written is None:
            return " (quote the value: it is text)"
        text = excerpt(written)[1:-1]
        quoted = f"{path[-1]}: '{text}'" if path and isinstance(path[-1], str) else f"'{text}'"
        return f" (YAML reads an unquoted {text} as a number: write {quoted})"

    @staticmethod
    def unknown_key_message(key: Any, valid: Any) -> str:
        valid = list(valid)
        close = difflib.get_close_matches(str(key)[:100], valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f" (valid: {', '.join(valid)})"
        return f"unknown key {excerpt(key)}{hint}"

    # -- hosts ---------------------------------------------------------------------------

    def resolve_hosts(self, cluster: ClusterSpec) -> list[Host]:
        hosts: list[Host] = []
        for name, (path, raw) in self.host_defs.items():
            if not raw:
                raise self.fail(f"host {name!r} has no variables: it needs at least "
                                "ansible_host and rank", path)
            spec: HostSpec = self.validate(HostSpec, raw, path)
            ssh = self.resolve_ssh(name, spec, path)
            ip = spec.ip
            if ip is None:
                try:
                    ip = str(ipaddress.IPv4Address(spec.ansible_host))
                except ValueError:
                    raise self.fail("ip is required when ansible_host is a name or an "
                                    "IPv6 address (it becomes HCCL_IF_IP, IPv4)",
                                    path) from None
            custom: dict[str, Any] = {}
            for layer in self.host_custom_layers.get(name, []):
                custom.update(layer)
            custom.update(spec.custom)
            hosts.append(Host(
                name=name, address=spec.ansible_host, rank=spec.rank, ip=ip, nic=spec.nic,
                device_ips=tuple(spec.device_ips) if spec.device_ips is not None else None,
                ssh=ssh, groups=tuple(self.host_groups.get(name, [])),
                super_pod_id=spec.super_pod_id,
                super_device_ids=(tuple(spec.super_device_ids)
                                  if spec.super_device_ids is not None else None),
                numa_node=spec.numa_node, cpus=spec.cpus,
                env=dict(spec.env), custom=custom,
            ))
        hosts.sort(key=lambda h: h.rank)
        return hosts

    def resolve_ssh(self, name: str, spec: HostSpec, path: YamlPath) -> SshSpec:
        merged: dict[str, Any] = {}
        last_path: YamlPath = path
        for layer_path, layer in self.host_ssh_layers.get(name, []):
            # validate each layer on its own so an error points at the line that has it
            self.validate(SshSpec, layer, layer_path)
            merged.update(layer)
            last_path = layer_path
        if spec.ssh:
            self.validate(SshSpec, spec.ssh, path + ("ssh",))
            merged.update(spec.ssh)
            last_path = path + ("ssh",)
        if spec.ansible_user is not None:
            merged["user"] = spec.ansible_user
        if spec.ansible_port is not None:
            merged["port"] = spec.ansible_port
        if spec.ansible_ssh_private_key_file is not None:
            merged["private_key"] = spec.ansible_ssh_private_key_file
        # CI on a jump host: the key and known_hosts files come from the environment
        # (e.g. GitLab file variables), never from arguments.
        for key, env in SSH_ENV_OVERRIDES.items():
            if os.environ.get(env):
                merged[key] = os.environ[env]
        return self.validate(SshSpec, merged, last_path)

    # -- serving groups ------------------------------------------------------------------

    def resolve_serving_groups(self, hosts: list[Host]) -> tuple[ServingGroup, ...]:
        """Each host's serving group; every host in exactly one when any group is marked."""
        if not self.serving_groups:
            return (ServingGroup(SINGLE_GROUP, tuple(h.name for h in hosts)),)
        members: dict[str, list[str]] = {g: [] for g in self.serving_groups}
        for host in hosts:
            mine = [g for g in self.host_groups.get(host.name, []) if g in members]
            if not mine:
                raise self.fail(f"host {host.name!r} is in no serving group (serving groups: "
                                f"{', '.join(self.serving_groups)}); add it to one",
                                self.host_path(host))
            if len(mine) > 1:
                raise self.fail(f"host {host.name!r} is in serving groups "
                                f"{' and '.join(mine)}: a host serves in one group only",
                                self.host_path(host))
            members[mine[0]].append(host.name)
        rank = {h.name: h.rank for h in hosts}
        return tuple(ServingGroup(g, tuple(sorted(names, key=rank.__getitem__)))
                     for g, names in members.items() if names or self.fail_empty(g))

    def fail_empty(self, group: str) -> bool:
        raise self.fail(f"serving group {group!r} has no hosts", self.group_lines[group])

    def in_group_order(self, hosts: list[Host],
                       serving_groups: tuple[ServingGroup, ...]) -> list[Host]:
        """Hosts sorted by serving group, then rank, each knowing its group."""
        by_name = {h.name: h for h in hosts}
        ordered = []
        for group in serving_groups:
            for name in group.hosts:
                host = by_name[name]
                if host.serving_group != group.name:
                    host = dataclasses.replace(host, serving_group=group.name)
                ordered.append(host)
        return ordered

    def resolve_gateway(self, hosts: list[Host], serving: ServingSpec,
                        serving_groups: tuple[ServingGroup, ...]) -> str | None:
        proxy_path = ("all", "vars", "serving", "proxy")
        if len(serving_groups) > 1 and not serving.proxy.enabled:
            raise self.fail(f"{len(serving_groups)} serving groups need the proxy that "
                            "balances across their heads: set serving.proxy.enabled: true "
                            "(the rolling deploy takes each group out of it)",
                            proxy_path if proxy_path in self.source.lines
                            else ("all", "vars", "serving"))
        if serving.proxy.gateway is None:
            return serving_groups[0].head if serving.proxy.enabled else None
        if not serving.proxy.enabled:
            raise self.fail("gateway is set but serving.proxy.enabled is false",
                            proxy_path + ("gateway",))
        if serving.proxy.gateway not in {h.name for h in hosts}:
            raise self.fail(f"no host named {excerpt(serving.proxy.gateway)} (hosts: "
                            f"{', '.join(h.name for h in hosts)})", proxy_path + ("gateway",))
        return serving.proxy.gateway

    # -- cross-field rules ---------------------------------------------------------------

    def host_path(self, host: Host, *field: Any) -> YamlPath:
        return self.host_defs[host.name][0] + tuple(field)

    def check_semantics(self, hosts: list[Host], sections: dict[str, Any],
                        serving_groups: tuple[ServingGroup, ...]) -> None:
        cluster: ClusterSpec = sections["cluster"]
        serving: ServingSpec = sections["serving"]
        seen_rank: dict[tuple[str, int], Host] = {}
        seen_addr: dict[tuple[str, int], Host] = {}
        seen_ip: dict[str, Host] = {}
        seen_device_ip: dict[str, tuple[Host, int]] = {}
        replicated = len(serving_groups) > 1
        for host in hosts:
            key_rank = (host.serving_group, host.rank)
            if key_rank in seen_rank:
                within = f" in serving group {host.serving_group}" if replicated else ""
                raise self.fail(f"rank {host.rank} is also used by "
                                f"{seen_rank[key_rank].name}{within}",
                                self.host_path(host, "rank"))
            seen_rank[key_rank] = host
            key = (host.address, host.ssh.port)
            if key in seen_addr:
                raise self.fail(f"{host_port(host.address, host.ssh.port)} is also host "
                                f"{seen_addr[key].name}", self.host_path(host, "ansible_host"))
            seen_addr[key] = host
            if host.ip in seen_ip:
                raise self.fail(f"ip {host.ip} is also used by {seen_ip[host.ip].name}",
                                self.host_path(host, "ip"))
            seen_ip[host.ip] = host
            if host.device_ips is not None:
                if len(host.device_ips) != cluster.npus_per_node:
                    raise self.fail(f"{len(host.device_ips)} device IPs for "
                                    f"{cluster.npus_per_node} NPUs (cluster.npus_per_node)",
                                    self.host_path(host, "device_ips"))
                for index, device_ip in enumerate(host.device_ips):
                    problem = _not_a_port_address(device_ip, cluster.roce.netmask)
                    if problem:
                        raise self.fail(problem, self.host_path(host, "device_ips", index))
                    if device_ip in seen_device_ip:
                        other, other_index = seen_device_ip[device_ip]
                        raise self.fail(f"device IP {device_ip} is also NPU {other_index} of "
                                        f"{other.name}",
                                        self.host_path(host, "device_ips", index))
                    seen_device_ip[device_ip] = (host, index)
            if host.super_device_ids is not None and \
                    len(host.super_device_ids) != cluster.npus_per_node:
                raise self.fail("super_device_ids needs one id per NPU",
                                self.host_path(host, "super_device_ids"))
        by_name = {h.name: h for h in hosts}
        size = len(serving_groups[0].hosts)
        for group in serving_groups:
            members = [by_name[n] for n in group.hosts]
            expected = list(range(len(members)))
            ranks = [h.rank for h in members]
            if ranks != expected:
                missing = sorted(set(expected) - set(ranks))
                offender = next(h for h in members if h.rank not in expected)
                within = f" within serving group {group.name}" if replicated else ""
                raise self.fail(f"ranks must be 0..{len(members) - 1} without gaps{within}; "
                                f"rank {missing[0]} is missing",
                                self.host_path(offender, "rank"))
            if len(members) != size:
                raise self.fail(f"serving group {group.name} has {len(members)} node(s), "
                                f"{serving_groups[0].name} has {size}: every group serves "
                                "the same layout", self.group_lines[group.name])
        if cluster.is_a3:
            for host in hosts:
                if host.super_pod_id is None or host.super_device_ids is None:
                    raise self.fail("A3 (rank table 1.2) needs super_pod_id and "
                                    "super_device_ids on every host", self.host_path(host))
        if sections["pd"] is None:      # a PD inventory's sides are checked by resolve_pd
            self.check_layout(size, cluster, serving)
        self.check_ports(hosts, serving, sections["deploy"], size)

    def check_ports(self, hosts: list[Host], serving: ServingSpec, deploy: DeploySpec,
                    group_size: int) -> None:
        """Ports that the same node listens on must differ."""
        serving_path = ("all", "vars", "serving")
        used: list[tuple[str, int, YamlPath]] = [
            ("serving.port", serving.port, serving_path + ("port",))]
        if serving.proxy.enabled:
            used.append(("serving.proxy.port", serving.proxy.port,
                         serving_path + ("proxy", "port")))
        used.append(("deploy.exporter_port", deploy.exporter_port,
                     ("all", "vars", "deploy", "exporter_port")))
        if serving.mode == "dp":
            used.append(("serving.data_parallel_rpc_port", serving.data_parallel_rpc_port,
                         serving_path + ("data_parallel_rpc_port",)))
        elif serving.mode == "mp" and group_size > 1:
            used.append(("serving.master_port", serving.master_port,
                         serving_path + ("master_port",)))
        elif serving.mode == "ray":
            used.append(("serving.ray_port", serving.ray_port, serving_path + ("ray_port",)))
        seen: dict[int, str] = {}
        for label, port, path in used:
            if port in seen:
                # point at whichever of the two the file actually spells out
                if path not in self.source.lines:
                    path = next(p for lbl, _, p in used if lbl == seen[port])
                    label, other = seen[port], label
                else:
                    other = seen[port]
                raise self.fail(f"port {port} is also {other}: every port a node listens "
                                "on must differ", path)
            seen[port] = label
        for host in hosts:
            if host.ssh.port in seen:
                raise self.fail(f"ssh port {host.ssh.port} is also {seen[host.ssh.port]} "
                                "on the same node", self.ssh_field_path(host, "port"))

    def check_layout(self, nodes: int, cluster: ClusterSpec, serving: ServingSpec) -> None:
        serving_path = ("all", "vars", "serving")

        def field(*candidates: str) -> YamlPath:
            """The first of `candidates` written in the file (errors point at real lines)."""
            for name in candidates:
                if serving_path + (name,) in self.source.lines:
                    return serving_path + (name,)
            return serving_path + (candidates[0],)

        tp, pp, dp = (serving.tensor_parallel_size, serving.pipeline_parallel_size,
                      serving.data_parallel_size)
        if serving.mode == "dp":
            local = serving.dp_local
            if dp % local:
                raise self.fail(f"data_parallel_size {dp} is not a multiple of "
                                f"data_parallel_size_local {local}",
                                field("data_parallel_size_local", "data_parallel_size"))
            if dp // local != nodes:
                raise self.fail(f"data_parallel_size {dp} / data_parallel_size_local {local} "
                                f"= {dp // local} nodes, but the inventory has {nodes}",
                                field("data_parallel_size", "data_parallel_size_local"))
            if tp * pp * local > cluster.npus_per_node:
                raise self.fail(f"tensor {tp} × pipeline {pp} × local data parallel {local} "
                                f"= {tp * pp * local} NPUs per node, but nodes have "
                                f"{cluster.npus_per_node}",
                                field("tensor_parallel_size", "pipeline_parallel_size",
                                      "data_parallel_size_local"))
        else:
            if dp != 1:
                raise self.fail(f"data_parallel_size must be 1 in {serving.mode} mode "
                                "(use mode: dp)", field("data_parallel_size"))
            world = tp * pp
            if serving.mode == "mp" and (world % nodes or world // nodes > cluster.npus_per_node):
                raise self.fail(f"tensor {tp} × pipeline {pp} = {world} ranks cannot be spread "
                                f"evenly over {nodes} nodes of {cluster.npus_per_node} NPUs",
                                field("tensor_parallel_size", "pipeline_parallel_size"))
            if serving.mode == "ray" and world > nodes * cluster.npus_per_node:
                raise self.fail(f"tensor {tp} × pipeline {pp} = {world} NPUs, but the cluster "
                                f"has {nodes * cluster.npus_per_node}",
                                field("tensor_parallel_size", "pipeline_parallel_size"))
        if serving.api_server_count and serving.mode != "dp":
            raise self.fail("api_server_count applies to mode: dp only",
                            field("api_server_count"))

    def check_controller_files(self, hosts: list[Host]) -> None:
        checked: set[str] = set()
        for host in hosts:
            origin = {field: f" (from {env})" if os.environ.get(env) else ""
                      for field, env in SSH_ENV_OVERRIDES.items()}
            known_hosts = host.ssh.known_hosts
            if known_hosts not in checked:
                checked.add(known_hosts)
                try:
                    check_known_hosts_file(known_hosts_path(known_hosts))
                except InputError as err:
                    raise self.fail(f"known_hosts file {shown_path(known_hosts)}"
                                    f"{origin['known_hosts']}: {err.reason}",
                                    self.ssh_field_path(host, "known_hosts")) from None
            key = host.ssh.private_key
            if key is None or key in checked:
                continue
            checked.add(key)
            kind = non_regular(Path(os.path.expanduser(key)))
            if kind == "missing":
                raise self.fail(f"SSH key file {key}{origin['private_key']} does not exist on "
                                "this machine", self.ssh_field_path(host, "private_key"))
            if kind is not None:
                raise self.fail(f"SSH key file {key}{origin['private_key']} is {kind}, not a "
                                "regular file", self.ssh_field_path(host, "private_key"))
            if not os.access(os.path.expanduser(key), os.R_OK):
                raise self.fail(f"SSH key file {key}{origin['private_key']} is not readable",
                                self.ssh_field_path(host, "private_key"))

    def ssh_field_path(self, host: Host, field: str) -> YamlPath:
        path, raw = self.host_defs[host.name]
        if field == "private_key" and "ansible_ssh_private_key_file" in raw:
            return path + ("ansible_ssh_private_key_file",)
        if isinstance(raw.get("ssh"), dict) and field in raw["ssh"]:
            return path + ("ssh", field)
        for layer_path, layer in reversed(self.host_ssh_layers.get(host.name, [])):
            if field in layer:
                return layer_path + (field,)
        return path

    def finish_groups(self, hosts: list[Host]) -> dict[str, tuple[str, ...]]:
        order = {h.name: index for index, h in enumerate(hosts)}
        groups = {name: tuple(sorted(members, key=order.__getitem__))
                  for name, members in self.groups.items()}
        groups["all"] = tuple(h.name for h in hosts)
        # every serving group's head / the others (one group: rank 0 / the rest)
        groups["head"] = tuple(h.name for h in hosts if h.is_head)
        groups["followers"] = tuple(h.name for h in hosts if not h.is_head)
        return groups


def _text_number_hint(text: str, key: Any) -> str:
    """For a number that YAML read as text: how to write it."""
    shown = f"{key}: " if isinstance(key, str) else ""
    body = text.strip()
    if re.fullmatch(r"[-+]?0o[0-7]+", body):
        return (f" (YAML 1.1 reads 0o… as text, not octal: write the decimal "
                f"{shown}{int(body.replace('0o', ''), 8)})")
    if re.fullmatch(r"[-+]?[0-9]{1,30}(\.[0-9]{0,30})?", body):
        return f" (quotes make it text: write {shown}{body})"
    return ""


def _not_a_port_address(address: str, netmask: str) -> str | None:
    """Why a RoCE port cannot have `address` in its subnet (cluster.roce.netmask), or None."""
    network = ipaddress.IPv4Network(f"{address}/{netmask}", strict=False)
    ip = ipaddress.IPv4Address(address)
    for special, what in ((network.network_address, "network"),
                          (network.broadcast_address, "broadcast")):
        if ip == special:
            return (f"device IP {address} is the {what} address of its subnet {network} "
                    f"(cluster.roce.netmask {netmask}), not a port's address")
    return None


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = _section_type(annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _section_type(annotation: Any) -> Any:
    import typing

    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Section):
            return candidate
    return None


def _is_pydantic_branch(part: Any) -> bool:
    # pydantic adds union branch names such as 'function-after[...]' to error locations
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "dict"))
