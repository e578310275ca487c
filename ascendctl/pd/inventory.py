"""A PD inventory (ascendctl/inventory/pd.py) as PD layouts: what each node's
`--kv-transfer-config` holds, and every rule and the port ledger over each serving group.

kv_port and engine_id are derived here unless the inventory sets them: kv_port just above
AscendDirectTransport's range `[20000, 20000 + 1000 × NPUs per node)` (the Mooncake
guide), engine_id one per node (the guide: "each node's engine_id is uniquely assigned").
The renderer and the rules read the same values, so what is checked is what is launched.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import (
    PD_PATH, ROLES, SERVING_PATH, STORAGE_CONNECTORS, Role, role_hosts, role_view,
)
from ascendctl.inventory.yamlsrc import YamlPath, dotted
from ascendctl.pd import ledger
from ascendctl.pd.layout import (
    KV_ROLE_OF, ExtraLayout, KvTransfer, Listener, NodeLaunch, PdLayout, Where,
)
from ascendctl.pd.rules import Finding, check_layout, refusals

OWNER_GATEWAY = "gateway (nginx, serving.proxy)"
OWNER_ROUTER = "PD router (pd.router)"
OWNER_ROUTER_METRICS = "PD router metrics (pd.router.port + 1)"
PORT_OVERLAP = "pd.port-overlap"


def default_kv_port(npus_per_node: int) -> int:
    return ledger.adt_range(npus_per_node).stop


def _role(host: Host) -> Role:
    if host.pd_role not in ROLES:
        raise ValueError(f"host {host.name} is on no PD side")
    return "prefill" if host.pd_role == "prefill" else "decode"


def kv_transfer_config(view: Inventory, host: Host) -> dict[str, Any]:
    """`--kv-transfer-config` of HOST in VIEW, one side of a unit (`role_view`): HOST's
    rank there is its place on its side."""
    pd = view.pd
    assert pd is not None
    role = _role(host)
    spec = pd.role(role)
    unit = view.serving_groups[0].name
    config: dict[str, Any] = {
        "kv_connector": pd.connector,
        "kv_role": KV_ROLE_OF[role],
        "kv_port": spec.kv_port or default_kv_port(view.cluster.npus_per_node),
        "engine_id": spec.engine_id or f"{view.cluster.name}-{unit}-{role}{host.rank}",
    }
    if pd.kv_buffer_device is not None:
        config["kv_buffer_device"] = pd.kv_buffer_device
    extra: dict[str, Any] = {
        side: {"dp_size": pd.role(side).data_parallel_size,
               "tp_size": pd.role(side).tensor_parallel_size} for side in ROLES}
    if pd.connector in STORAGE_CONNECTORS:
        extra["shared_storage_path"] = pd.shared_storage_path
    config["kv_connector_extra_config"] = extra
    return config


def kv_transfer_args(view: Inventory, host: Host) -> list[str]:
    """The flags a PD node's engine gets besides the side's own (none outside PD)."""
    if view.pd is None or host.pd_role is None:
        return []
    return ["--kv-transfer-config",
            json.dumps(kv_transfer_config(view, host), separators=(", ", ": "))]


# ---- the inventory as layouts ----

class _Places:
    """Where each value of the inventory is written (or would be), as a `Where`."""

    def __init__(self, inv: Inventory):
        self.inv = inv
        self.lines = inv.source.lines

    def at(self, *paths: YamlPath) -> Where:
        """The first of PATHS the file spells out, else the last (its nearest written
        ancestor's line)."""
        path = next((p for p in paths if p in self.lines), paths[-1])
        return Where(str(self.inv.path), self.inv.source.line_of(path), dotted(path))

    def host(self, host: Host, *field: str) -> Where:
        for path in self.lines:
            if len(path) >= 2 and path[-2:] == ("hosts", host.name) \
                    and path + ("rank",) in self.lines:
                return self.at(path + field, path)
        return Where(str(self.inv.path), None, host.name)


def unit_layout(inv: Inventory, unit: str) -> PdLayout:
    """Serving group UNIT of a PD inventory as the rules read it, every value's `Where`
    in the inventory."""
    pd = inv.pd
    if pd is None:
        raise ValueError("not a PD inventory")
    places = _Places(inv)
    nodes: list[NodeLaunch] = []
    index_of: dict[str, int] = {}
    for role in ROLES:
        view = role_view(inv, unit, role)
        side = PD_PATH + (role,)
        s = view.serving
        master = len(nodes)
        for host in view.hosts:
            index = len(nodes)
            index_of[host.name] = index
            kv = kv_transfer_config(view, host)
            extra = kv["kv_connector_extra_config"]
            where = {
                "node": places.host(host),
                "npus": places.at(("all", "vars", "cluster", "npus_per_node")),
                "api_port": places.at(side + ("port",), SERVING_PATH + ("port",)),
                "dp_rpc_port": places.at(side + ("data_parallel_rpc_port",),
                                         SERVING_PATH + ("data_parallel_rpc_port",)),
                "kv_port": places.at(side + ("kv_port",)),
                "kv_role": places.at(side),
                "engine_id": places.at(side + ("engine_id",)),
                "connector": places.at(PD_PATH + ("connector",)),
                "dp_size": places.at(side + ("data_parallel_size",)),
                "tp_size": places.at(side + ("tensor_parallel_size",)),
                "dp_size_local": places.at(side + ("data_parallel_size_local",),
                                           side + ("data_parallel_size",)),
                "dp_rank_start": places.host(host, "rank"),
                "dp_address": places.host(host, "ip"),
                "headless": places.host(host, "rank"),
                "extra.prefill": places.at(PD_PATH + ("prefill",)),
                "extra.decode": places.at(PD_PATH + ("decode",)),
                "prefix_caching": places.at(side + ("enable_prefix_caching",),
                                            SERVING_PATH + ("enable_prefix_caching",), side),
                "num_speculative_tokens": places.at(
                    side + ("speculative_config",), SERVING_PATH + ("speculative_config",)),
                "recompute_scheduler": places.at(
                    side + ("additional_config", "recompute_scheduler_enable"),
                    SERVING_PATH + ("additional_config", "recompute_scheduler_enable"),
                    side + ("additional_config",), SERVING_PATH + ("additional_config",)),
            }
            tokens = (s.speculative_config or {}).get("num_speculative_tokens")
            nodes.append(NodeLaunch(
                index=index, role=role, npus=inv.cluster.npus_per_node,
                tp_size=s.tensor_parallel_size, dp_size=s.data_parallel_size,
                dp_size_local=s.dp_local, dp_rank_start=host.rank * s.dp_local,
                kv=KvTransfer(
                    connector=kv["kv_connector"], kv_role=kv["kv_role"],
                    kv_port=kv["kv_port"], engine_id=kv["engine_id"],
                    prefill=ExtraLayout(extra["prefill"]["dp_size"],
                                        extra["prefill"]["tp_size"]),
                    decode=ExtraLayout(extra["decode"]["dp_size"], extra["decode"]["tp_size"])),
                where=where, api_port=s.port, dp_rpc_port=s.data_parallel_rpc_port,
                dp_address=view.head.ip, dp_master=master, headless=not host.is_head,
                prefix_caching=s.enable_prefix_caching is not False,
                num_speculative_tokens=tokens if isinstance(tokens, int)
                and not isinstance(tokens, bool) else None,
                recompute_scheduler=(s.additional_config or {}).get(
                    "recompute_scheduler_enable") is True))
    listeners: list[Listener] = []
    gateway = inv.gateway
    if gateway is not None and gateway.name in index_of:
        proxy = SERVING_PATH + ("proxy", "port")
        listeners.append(Listener(index_of[gateway.name], OWNER_GATEWAY, inv.serving.proxy.port,
                                  places.at(proxy), dotted(proxy)))
    router = PD_PATH + ("router", "port")
    listeners.append(Listener(0, OWNER_ROUTER, pd.router.port,
                              places.at(router, PD_PATH + ("router",), PD_PATH), dotted(router)))
    listeners.append(Listener(0, OWNER_ROUTER_METRICS, pd.router.metrics_port,
                              places.at(router, PD_PATH + ("router",), PD_PATH), dotted(router)))
    exporter = ("all", "vars", "deploy", "exporter_port")
    return PdLayout(
        file=str(inv.path), model=inv.model.name or inv.model.served_name or "",
        npu_per_node=inv.cluster.npus_per_node, nodes=tuple(nodes),
        where={"exporter_port": places.at(exporter)},
        exporter_port=inv.deploy.exporter_port, listeners=tuple(listeners))


def unit_layouts(inv: Inventory) -> dict[str, PdLayout]:
    """Every serving group's layout (none outside PD)."""
    if inv.pd is None:
        return {}
    return {group.name: unit_layout(inv, group.name) for group in inv.serving_groups}


_NODE = re.compile(r"\bnode (\d+)\b")


def inventory_findings(inv: Inventory) -> list[Finding]:
    """Every rule's findings over every serving group, each `node N` named by its host."""
    written = {dotted(path) for path in inv.source.lines}
    found: list[Finding] = []
    for unit, layout in unit_layouts(inv).items():
        names = [h.name for role in ROLES for h in role_hosts(inv, unit, role)]
        for finding in check_layout(layout):
            where = finding.where
            if finding.rule == PORT_OVERLAP and where.field not in written:
                where = _written_owner(layout, where, written)
            found.append(dataclasses.replace(finding, where=where,
                                             message=_with_hosts(finding.message, names)))
    return found


def _written_owner(layout: PdLayout, where: Where, written: set[str]) -> Where:
    """For two owners of one port, the one the inventory spells out (a default has no
    line of its own to point at)."""
    for overlap in ledger.overlaps(layout):
        if overlap.second.where == where and overlap.first.where.field in written:
            return overlap.first.where
    return where


def _with_hosts(message: str, names: list[str]) -> str:
    def named(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"{match.group(0)} ({names[index] if index < len(names) else '?'})"
    return _NODE.sub(named, message)


def describe(finding: Finding) -> str:
    """`file:line: field: message [rule-id]`, the field as the inventory spells it."""
    return (f"{finding.where}: {finding.where.field or finding.field}: {finding.message} "
            f"[{finding.rule}]")


def refuse_pd_rules(inv: Inventory) -> None:
    """InputError (exit 2, as any invalid inventory) on the first refusing rule."""
    refused = refusals(inventory_findings(inv))
    if not refused:
        return
    first = refused[0]
    more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
    raise InputError(f"{first.message} [{first.rule}]{more}", file=first.where.file,
                     line=first.where.line, field=first.where.field or first.field)


def pd_warnings(inv: Inventory) -> list[str]:
    return [describe(f) for f in inventory_findings(inv) if f.severity == "warn"]
