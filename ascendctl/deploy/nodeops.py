"""Release bookkeeping on one node, over its persistent connection.

Each call is one remote execution of runtime/ascendctl_runtime/release_ops.py, shipped
with the call on stdin (ascendctl/transport/nodecall.py). No value from the inventory
passes through a shell. Answers come back typed (ascendctl/deploy/nodestate.py).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from ascendctl.deploy.nodestate import (
    LockAnswer, NodeState, PruneAnswer, StageAnswer, SwitchAnswer,
)
from ascendctl.render.files import RenderedFile
from ascendctl.transport.nodecall import NodeCallError, call_node

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.transport.remote import Remote


class NodeOpError(NodeCallError):
    """A release operation failed on a node."""


class ForceUnlock(str, Enum):
    """How far acquiring the deploy lock may go against a lock someone else holds."""

    NO = "no"            # refuse
    STALE = "stale"      # --force-unlock: break it only when its heartbeat is stale
    ANY = "any"          # --force-unlock --really: break it even when it is alive


class NodeOps:
    def __init__(self, conn: "Remote", *, node: str, root: str, python: str,
                 become: bool | None = None, timeout: float = 300.0):
        self.conn, self.node, self.root = conn, node, root
        self.python, self.become, self.timeout = python, become, timeout

    @classmethod
    def for_host(cls, inv: "Inventory", host: "Host", conn: "Remote") -> "NodeOps":
        return cls(conn, node=host.name, root=inv.deploy.root, python=inv.deploy.python,
                   timeout=host.ssh.command_timeout)

    def call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        """One operation's raw JSON answer (for callers with their own parser: status)."""
        return call_node(self.conn, node=self.node, python=self.python, entry="release_ops",
                         request={"op": op, "root": self.root, "kwargs": kwargs},
                         timeout=self.timeout, become=self.become, error=NodeOpError)

    def state(self, units: Sequence[str], *, ip: str | None = None) -> NodeState:
        return NodeState.from_json(self.call("state", units=list(units), ip=ip))

    def stage(self, release_id: str, files: Sequence[RenderedFile], meta: Mapping[str, Any],
              *, check: bool, diff: bool) -> StageAnswer:
        encoded = [{"path": f.path, "b64": base64.b64encode(f.content).decode(),
                    "mode": f.mode, "secret": f.secret} for f in files]
        return StageAnswer.from_json(self.call("stage", release_id=release_id, files=encoded,
                                               meta=dict(meta), check=check, diff=diff))

    def install_units(self, release_id: str, units: Sequence[str], *, check: bool = False
                      ) -> list[str]:
        """The units whose installed file changed (systemd was reloaded if any did)."""
        answer = self.call("install_units", release_id=release_id, units=list(units),
                           check=check)
        return [str(u) for u in answer.get("changed") or ()]

    def switch(self, release_id: str, *, check: bool = False) -> SwitchAnswer:
        return SwitchAnswer.from_json(self.call("switch", release_id=release_id, check=check))

    def unset_current(self) -> SwitchAnswer:
        return SwitchAnswer.from_json(self.call("unset_current"))

    def mark(self, release_id: str, status: str) -> None:
        self.call("mark", release_id=release_id, status=status)

    def history(self, event: Mapping[str, Any]) -> None:
        self.call("history", event={k: v for k, v in event.items() if v is not None})

    def prune(self, keep: int, protect: Sequence[str], *, check: bool = False) -> PruneAnswer:
        return PruneAnswer.from_json(self.call("prune", keep=keep, protect=list(protect),
                                               check=check))

    def lock(self, action: str, holder: Mapping[str, Any], *, stale_after: float = 900.0,
             force: ForceUnlock = ForceUnlock.NO) -> LockAnswer:
        return LockAnswer.from_json(self.call("lock", action=action, holder=dict(holder),
                                              stale_after=stale_after, force=force.value))

