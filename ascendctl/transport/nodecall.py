"""Run one operation of a node-side runtime module (runtime/ascendctl_runtime/) on a node,
in one remote execution over the host's persistent connection.

The node's Python reads "<entry>\\0<path>\\0<source>\\0...<request json>" from stdin: the
entry module's name, then the entry and every node module it imports (found from its
imports, ascendctl/nodecode.py), each under its path below a sys.path directory
(ascendctl_runtime/nodeutil.py, ascendctl/facts/__init__.py, ...). An import hook serves
those sources, so the modules import each other as they would when installed, and the
entry's run_call(request) answers. Nothing has to be installed on the node first, and no
value passes through a shell: the command line is fixed, everything else travels on stdin
(JSON never holds a raw NUL byte).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from ascendctl.errors import AscendctlError
from ascendctl.nodecode import RUNTIME_PACKAGE, installed
from ascendctl.transport import quoting

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote

# The import hook is a plain finder and loader (importlib.abc would import far more than
# the call itself needs).
BOOTSTRAP = (
    "import sys, importlib, importlib.machinery\n"
    "entry, *parts, request = sys.stdin.buffer.read().split(b'\\0')\n"
    "shipped = {}\n"
    "for path, source in zip(parts[0::2], parts[1::2]):\n"
    "    path = path.decode()\n"
    "    name = path[:-3].replace('/', '.')\n"
    "    package = name.endswith('.__init__')\n"
    "    shipped[name[:-9] if package else name] = (path, source, package)\n"
    "class Shipped:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name in shipped:\n"
    "            return importlib.machinery.ModuleSpec(name, self, origin=shipped[name][0],\n"
    "                                                  is_package=shipped[name][2])\n"
    "    def create_module(self, spec):\n"
    "        return None\n"
    "    def exec_module(self, module):\n"
    "        path, source, _ = shipped[module.__name__]\n"
    "        exec(compile(source, path, 'exec'), module.__dict__)\n"
    "sys.meta_path.insert(0, Shipped())\n"
    "sys.exit(importlib.import_module(entry.decode()).run_call(request))\n"
)


class NodeCallError(AscendctlError):
    def __init__(self, node: str, op: str, message: str):
        super().__init__(f"{node}: {op}: {message}")
        self.node, self.op, self.reason = node, op, message


def entry_module(entry: str) -> str:
    """ENTRY as a dotted module name (a bare name is a module of ascendctl_runtime)."""
    return entry if "." in entry else f"{RUNTIME_PACKAGE}.{entry}"


@cache
def shipped_with(entry: str) -> tuple[tuple[str, bytes], ...]:
    """(path, source) of ENTRY and of the node code it imports."""
    return tuple((module.relative_path, module.source())
                 for module in installed().closure([entry_module(entry)]))


def call_stdin(entry: str, request: dict[str, Any]) -> bytes:
    """What BOOTSTRAP reads: ENTRY's name and modules, then the request."""
    parts: list[bytes] = [entry_module(entry).encode()]
    for path, source in shipped_with(entry):
        parts += [path.encode(), source]
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
