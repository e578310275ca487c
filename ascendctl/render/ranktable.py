"""The HCCL rank table (`hccl.json`, RANK_TABLE_FILE): schema 1.0 for A2, 1.2 for A3.

Every value is a string (as hccl_tools.py and the MindCluster operator write them);
`status` is `completed` so consumers that poll for it proceed at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory import Host, Inventory


def rank_table_version(inv: Inventory) -> str:
    return "1.2" if inv.cluster.is_a3 else "1.0"


def _device_ips(inv: Inventory, host: Host,
                discovered: Mapping[str, Sequence[str]] | None) -> list[str]:
    ips = host.device_ips
    if ips is None and discovered is not None and host.name in discovered:
        ips = tuple(discovered[host.name])
    if ips is None:
        raise InputError(f"host {host.name}: device_ips are not set and were not discovered "
                         "(/etc/hccn.conf); the rank table needs them", file=str(inv.path),
                         field=f"{host.name}.device_ips")
    if len(ips) != inv.cluster.npus_per_node:
        raise InputError(f"host {host.name}: {len(ips)} device IPs for "
                         f"{inv.cluster.npus_per_node} NPUs", file=str(inv.path),
                         field=f"{host.name}.device_ips")
    return list(ips)


def build_rank_table(inv: Inventory, *,
                     device_ips: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    npus = inv.cluster.npus_per_node
    a3 = inv.cluster.is_a3
    servers = []
    for host in inv.hosts:
        ips = _device_ips(inv, host, device_ips)
        devices = []
        for index, ip in enumerate(ips):
            device = {"device_id": str(index), "device_ip": ip}
            if a3:
                assert host.super_device_ids is not None
                device["super_device_id"] = str(host.super_device_ids[index])
            device["rank_id"] = str(host.rank * npus + index)
            devices.append(device)
        servers.append({"server_id": host.ip, "device": devices, "host_nic_ip": "reserve"})
    table: dict[str, Any] = {"version": rank_table_version(inv),
                             "server_count": str(len(inv.hosts)),
                             "server_list": servers}
    if a3:
        pods: dict[int, list[str]] = {}
        for host in inv.hosts:
            pods.setdefault(host.super_pod_id or 0, []).append(host.ip)
        table["super_pod_list"] = [
            {"super_pod_id": str(pod), "server_list": [{"server_id": s} for s in members]}
            for pod, members in sorted(pods.items())]
    table["status"] = "completed"
    return table


def rank_table_json(table: dict[str, Any]) -> bytes:
    return (json.dumps(table, indent=4) + "\n").encode()
