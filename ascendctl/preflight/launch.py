"""What the launch mode binds and connects to: ports per node, the head's address, the
socket NIC each node's engine will use (the values the renderer puts in the units)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ascendctl_runtime.layout import UNIT_PREFIX

from ascendctl.inventory import Host, Inventory

OWN_UNIT_PREFIX = UNIT_PREFIX      # ascendctl-engine/ray/exporter/watchdog.service
PROXY_UNIT = "nginx.service"        # the gateway's reverse proxy (serving.proxy)


@dataclass(frozen=True)
class PortUse:
    port: int
    what: str                       # "API server", "--master-port", ...
    owner_units: tuple[str, ...] = ()   # besides ascendctl-*: units allowed to hold it


def launch_ports(inv: Inventory) -> tuple[PortUse, ...]:
    """Ports followers connect to on their group's head (empty for single-node groups)."""
    s = inv.serving
    if inv.group_size < 2:
        return ()
    if s.mode == "dp":
        return (PortUse(s.data_parallel_rpc_port, "--data-parallel-rpc-port"),)
    if s.mode == "ray":
        return (PortUse(s.ray_port, "Ray GCS (--port)"),)
    return (PortUse(s.master_port, "--master-port"),)


def ports_bound(inv: Inventory, host: Host) -> tuple[PortUse, ...]:
    """Ports this node's units will listen on (they must be free before a first deploy)."""
    s = inv.serving
    uses = [PortUse(inv.deploy.exporter_port, "metrics exporter")]
    if host.is_head:
        uses.append(PortUse(s.port, "API server (--port)"))
        uses += launch_ports(inv)
    gateway = inv.gateway_name or inv.serving_groups[0].head
    if s.proxy.enabled and host.name == gateway:
        uses.append(PortUse(s.proxy.port, "reverse proxy", (PROXY_UNIT,)))
    seen: dict[int, PortUse] = {}
    for use in uses:
        seen.setdefault(use.port, use)
    return tuple(seen.values())


def _env(inv: Inventory, host: Host, name: str) -> str | None:
    """An engine variable as the units get it: host env over serving env."""
    for env in (host.env, inv.serving.env):
        if name in env:
            return str(env[name])
    return None


def socket_nic(inv: Inventory, host: Host) -> tuple[str | None, str]:
    """(NIC, address) for HCCL/Gloo/TP sockets: HCCL_SOCKET_IFNAME (or GLOO_/TP_) and
    HCCL_IF_IP overrides from the environment, else the host's `nic` and `ip`."""
    nic = None
    for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
        nic = _env(inv, host, name)
        if nic:
            break
    return (nic or host.nic), (_env(inv, host, "HCCL_IF_IP") or host.ip)


def serving_python(inv: Inventory) -> str:
    """The interpreter of the serving environment: `python` next to the engine executable
    when `serving.engine` is a path (a venv's bin/), else `python3` from PATH."""
    engine = inv.serving.engine
    if engine.startswith("/"):
        return posixpath.join(posixpath.dirname(engine), "python")
    return "python3"
