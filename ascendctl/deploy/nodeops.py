"""Release bookkeeping on one node, over its persistent SSH connection.

Each call is one remote execution: the node's Python reads release_ops.py and the call
(JSON) from stdin. No value from the inventory passes through a shell.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from ascendctl.deploy.bundle import runtime_module, runtime_source
from ascendctl.errors import AscendctlError
from ascendctl.render.files import RenderedFile
from ascendctl.transport import quoting


class NodeOpError(AscendctlError):
    def __init__(self, node: str, op: str, message: str):
        super().__init__(f"{node}: {op}: {message}")
        self.node, self.op = node, op


class NodeOps:
    def __init__(self, conn: Any, *, node: str, root: str, python: str,
                 become: bool | None = None, timeout: float = 300.0):
        self.conn, self.node, self.root = conn, node, root
        self.python, self.become, self.timeout = python, become, timeout

    def call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        bootstrap = runtime_module("release_ops").BOOTSTRAP
        command = quoting.join_argv([self.python, "-c", bootstrap])
        payload = json.dumps({"op": op, "root": self.root, "kwargs": kwargs}).encode()
        result = self.conn.exec(self.conn.become_command(command, self.become),
                                stdin=runtime_source("release_ops") + b"\0" + payload,
                                timeout=self.timeout)
        lines = result.stdout.strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
            raise NodeOpError(self.node, op, detail[:400])
        if "error" in answer:
            raise NodeOpError(self.node, op, str(answer["error"])[:400])
        return answer

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
