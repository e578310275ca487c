"""Collect from every node at once: one remote run of the runtime doctor_node.py per node."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl_runtime.layout import ALL_UNITS

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.transport.nodecall import NodeCallError, call_node

SINCE_RE = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
COLLECT_TIMEOUT_S = 300.0


def parse_since(text: str) -> int:
    """'90s', '30m', '1h', '2d', '1w' (or plain seconds) → seconds."""
    match = SINCE_RE.match(text or "")
    if not match or int(match.group(1)) == 0:
        raise InputError(f"{text!r}: use a duration such as 30m, 1h, 2d", field="--since")
    return int(match.group(1)) * UNIT_SECONDS[match.group(2)]


@dataclass
class NodeCollection:
    node: str
    address: str
    rank: int
    ok: bool
    error: Optional[str] = None
    status: str = "ok"                       # ok | unreachable | failed
    hostname: Optional[str] = None
    collected_at: Optional[str] = None
    seconds: Optional[float] = None
    files: dict[str, str] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    group: Optional[str] = None              # its serving group


def collect(inv: Inventory, pool: Any, since_s: int) -> list[NodeCollection]:
    """Every node's logs and state (in rank order); unreachable nodes are recorded."""
    units = list(ALL_UNITS) + (["nginx.service"] if inv.serving.proxy.enabled else [])
    kwargs = {"root": inv.deploy.root, "units": units, "since_s": since_s,
              "ports": inv.cluster.npus_per_node}

    def one(conn: Any) -> dict[str, Any]:
        return call_node(conn, node=conn.name, python=inv.deploy.python, entry="doctor_node",
                         request={"op": "collect", "kwargs": kwargs},
                         timeout=COLLECT_TIMEOUT_S)

    results = pool.map(one)
    collections = []
    for host in inv.hosts:
        res = results[host.name]
        group = host.serving_group if inv.replicated else None
        if res.ok:
            value = res.value
            collections.append(NodeCollection(
                node=host.name, address=host.address, rank=host.rank, ok=True,
                hostname=value.get("hostname"), collected_at=value.get("collected_at"),
                seconds=value.get("seconds"), files=value.get("files", {}),
                commands=value.get("commands", {}), notes=value.get("notes", []),
                group=group))
        else:
            status = "unreachable" if res.status.value == "unreachable" else "failed"
            error = res.error
            if isinstance(error, str) and error.startswith("collect: "):
                error = error[len("collect: "):]
            collections.append(NodeCollection(node=host.name, address=host.address,
                                              rank=host.rank, ok=False, error=error,
                                              status=status, group=group))
    return collections


__all__ = ["NodeCollection", "NodeCallError", "collect", "parse_since"]
