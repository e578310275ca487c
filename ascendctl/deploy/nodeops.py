"""Release bookkeeping on one node, over its persistent SSH connection.

Each call is one remote execution of runtime/ascendctl_runtime/release_ops.py, shipped
with the call on stdin (ascendctl/transport/nodecall.py). No value from the inventory
passes through a shell.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from ascendctl.render.files import RenderedFile
from ascendctl.transport.nodecall import NodeCallError, call_node


class NodeOpError(NodeCallError):
    """A release operation failed on a node."""


class NodeOps:
    def __init__(self, conn: Any, *, node: str, root: str, python: str,
                 become: bool | None = None, timeout: float = 300.0):
        self.conn, self.node, self.root = conn, node, root
        self.python, self.become, self.timeout = python, become, timeout

    def call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        return call_node(self.conn, node=self.node, python=self.python, entry="release_ops",
                         request={"op": op, "root": self.root, "kwargs": kwargs},
                         timeout=self.timeout, become=self.become, error=NodeOpError)

    def state(self, units: Sequence[str], *, ip: str | None = None) -> dict[str, Any]:
        return self.call("state", units=list(units), ip=ip)

    def stage(self, release_id: str, files: Sequence[RenderedFile], meta: dict[str, Any],
              *, check: bool, diff: bool) -> dict[str, Any]:
        encoded = [{"path": f.path, "b64": base64.b64encode(f.content).decode(),
                    "mode": f.mode, "secret": f.secret} for f in files]
        return self.call("stage", release_id=release_id, files=encoded, meta=meta,
                         check=check, diff=diff)

    def install_units(self, release_id: str, units: Sequence[str], *, check: bool = False
                      ) -> list[str]:
        return self.call("install_units", release_id=release_id, units=list(units),
                         check=check)["changed"]

    def switch(self, release_id: str, *, check: bool = False) -> dict[str, Any]:
        return self.call("switch", release_id=release_id, check=check)

    def mark(self, release_id: str, status: str) -> None:
        self.call("mark", release_id=release_id, status=status)

    def history(self, event: dict[str, Any]) -> None:
        self.call("history", event=event)

    def prune(self, keep: int, protect: Sequence[str], *, check: bool = False
              ) -> dict[str, Any]:
        return self.call("prune", keep=keep, protect=list(protect), check=check)

    def lock(self, action: str, holder: dict[str, Any], *, stale_after: float = 900.0,
             force: bool = False) -> dict[str, Any]:
        return self.call("lock", action=action, holder=holder, stale_after=stale_after,
                         force=force)
