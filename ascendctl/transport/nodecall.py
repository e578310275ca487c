"""Run one operation of a node-side runtime module (runtime/ascendctl_runtime/) on a node,
in one remote execution over the host's persistent connection.

The node's Python reads "<name>\\0<source>\\0...<request json>" from stdin, registers each
source as the module ascendctl_runtime.<name> (so the modules import each other as they
would when installed) and calls the last one's run_call(request). Nothing has to be
installed on the node first, and no value passes through a shell: the command line is
fixed, everything else travels on stdin (JSON never holds a raw NUL byte).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from ascendctl.errors import AscendctlError
from ascendctl.paths import runtime_dir
from ascendctl.transport import quoting

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote

PACKAGE = "ascendctl_runtime"

BOOTSTRAP = (
    "import sys, types\n"
    "*parts, request = sys.stdin.buffer.read().split(b'\\0')\n"
    f"package = sys.modules['{PACKAGE}'] = types.ModuleType('{PACKAGE}')\n"
    "package.__path__ = []\n"
    "for name, source in zip(parts[0::2], parts[1::2]):\n"
    f"    fullname = '{PACKAGE}.' + name.decode()\n"
    "    module = sys.modules[fullname] = types.ModuleType(fullname)\n"
    "    setattr(package, name.decode(), module)\n"
    "    exec(compile(source, fullname.replace('.', '/') + '.py', 'exec'), module.__dict__)\n"
    "sys.exit(module.run_call(request))\n"
)

# Each entry module with the runtime modules it imports, in the order they load.
SHIPPED_WITH = {
    "release_ops": ("nodeutil", "release_ops"),
    "bench_node": ("nodeutil", "bench_node"),
    "doctor_node": ("nodeutil", "doctor_node"),
    "engine_node": ("nodeutil", "engine_node"),
    "quality_node": ("nodeutil", "quality_node"),
    "proxy_node": ("nodeutil", "proxy_node"),
    "status_node": ("nodeutil", "healthstore", "probe", "engine_state", "status_node"),
}


class NodeCallError(AscendctlError):
    def __init__(self, node: str, op: str, message: str):
        super().__init__(f"{node}: {op}: {message}")
        self.node, self.op, self.reason = node, op, message


@cache
def _source(name: str) -> bytes:
    return (runtime_dir() / f"{name}.py").read_bytes()


def call_stdin(entry: str, request: dict[str, Any]) -> bytes:
    """What BOOTSTRAP reads: ENTRY's modules, then the request."""
    parts: list[bytes] = []
    for name in SHIPPED_WITH[entry]:
        parts += [name.encode(), _source(name)]
    return b"\0".join([*parts, json.dumps(request).encode()])


def bootstrap_command(python: str) -> str:
    return quoting.join_argv([python, "-c", BOOTSTRAP])


def call_node(conn: "Remote", *, node: str, python: str, entry: str, request: dict[str, Any],
              timeout: float, become: bool | None = None,
              error: type[NodeCallError] = NodeCallError) -> dict[str, Any]:
    """REQUEST ({"op", ...}) run by ENTRY's run_call on the node; its JSON answer, or
    ERROR(node, op, reason) when it fails, times out or answers nothing readable."""
    op = str(request.get("op"))
    result = conn.exec(conn.become_command(bootstrap_command(python), become),
                       stdin=call_stdin(entry, request), timeout=timeout)
    if getattr(result, "timed_out", False):
        raise error(node, op, f"no answer within {timeout:g} s")
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
        raise error(node, op, detail[:400])
    if "error" in answer:
        raise error(node, op, str(answer["error"])[:600])
    return answer
