"""Run a standard-library Python module on a node, in one SSH execution.

The node's Python reads "<module source>\\0<call json>" from stdin (the module never has
to be installed there, and no value passes through a shell), runs `run_call(payload)` of
that module and prints one JSON object. Used by `bench` and `doctor` for their node-side
halves (ascendctl/benchmark/node_bench.py, ascendctl/doctor/node_collect.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ascendctl.errors import AscendctlError
from ascendctl.transport import quoting

BOOTSTRAP = (
    "import sys\n"
    "source, call = sys.stdin.buffer.read().split(b'\\0', 1)\n"
    "namespace = {'__name__': 'ascendctl_node_script'}\n"
    "exec(compile(source, sys.argv[1], 'exec'), namespace)\n"
    "sys.exit(namespace['run_call'](call))\n"
)


class NodeScriptError(AscendctlError):
    def __init__(self, node: str, op: str, message: str):
        super().__init__(f"{node}: {op}: {message}")
        self.node, self.op, self.reason = node, op, message


def module_source(path: Path) -> bytes:
    return path.read_bytes()


def call_node_script(conn: Any, *, node: str, python: str, source: bytes, name: str,
                     op: str, kwargs: dict[str, Any], timeout: float,
                     become: bool | None = None) -> dict[str, Any]:
    """Run op(**kwargs) of the module `source` on the node; its JSON answer, or raise."""
    command = quoting.join_argv([python, "-c", BOOTSTRAP, name])
    payload = json.dumps({"op": op, "kwargs": kwargs}).encode()
    result = conn.exec(conn.become_command(command, become), stdin=source + b"\0" + payload,
                       timeout=timeout)
    if getattr(result, "timed_out", False):
        raise NodeScriptError(node, op, f"no answer within {timeout:g} s")
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
        raise NodeScriptError(node, op, detail[:400])
    if "error" in answer:
        raise NodeScriptError(node, op, str(answer["error"])[:600])
    return answer
