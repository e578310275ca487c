"""Control calls to the node helper over the transport's persistent connections.

Each call is one remote execution: an argv (quoted by the transport) with a JSON request
on stdin, answered by one JSON line. Bulk data never goes this way (see `relay`).
"""

from __future__ import annotations

import json
from typing import Any

from ascendctl.errors import AscendctlError
from ascendctl.weights.nodehelper import helper_source, remote_helper_path
from ascendctl.weights.relay import NodeAccess


def node_access(inv, host) -> NodeAccess:
    root = inv.deploy.root
    return NodeAccess(host=host, root=root, python=inv.deploy.python,
                      helper=remote_helper_path(root))


def install_helper(conn, access: NodeAccess) -> None:
    """Put the helper on the node (unchanged content is not rewritten)."""
    conn.run(["mkdir", "-p", f"{access.root}/bin", f"{access.root}/store",
              f"{access.root}/tmp"]).check()
    conn.write_file(access.helper, helper_source(), mode=0o755)


# Runs the helper without installing it: the script comes first on stdin (exactly N
# bytes), the JSON request after it. Read-only calls (state, verify) leave no trace.
BOOTSTRAP = ("import sys;n=int(sys.argv[1]);src=sys.stdin.buffer.read(n);"
             "sys.argv=['weights_node']+sys.argv[2:];"
             "exec(compile(src,'weights_node','exec'),{'__name__':'__main__'})")


def call_helper(conn, access: NodeAccess, command: str, request: dict | None = None,
                *, extra: list[str] | None = None, stdin: bytes | None = None,
                inline: bool = False) -> dict | None:
    args = ["--root", access.root, "--name", access.name, command, *(extra or [])]
    data = stdin if stdin is not None else (json.dumps(request).encode()
                                            if request is not None else b"")
    if inline:
        script = helper_source()
        argv = [access.python, "-c", BOOTSTRAP, str(len(script)), *args]
        data = script + data
    else:
        argv = [access.python, access.helper, *args]
    result = conn.run(argv, stdin=data)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    if not result.ok:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
        raise AscendctlError(f"{access.name}: weights helper {command} failed: {detail}")
    return None


def objects_request(files) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for planned in files:
        entry = planned.entry
        seen.setdefault(entry.sha256, {"sha256": entry.sha256, "size": entry.size,
                                       "fingerprint": entry.fingerprint})
    return list(seen.values())


def materialise_model(conn, access: NodeAccess, node_plan, dest: str) -> dict:
    """Make `dest` (e.g. `<release>/model`) on this node: symlinks into the store for
    every file the node's plan lists, plus its own index. Fails, naming the missing
    files, if the store lacks any (push first). Nothing is copied."""
    if not dest.startswith("/"):
        raise AscendctlError(f"{access.name}: {dest!r} must be an absolute path")
    answer = call_helper(conn, access, "materialise", node_plan.materialise_request(dest),
                         inline=True)
    if not answer or not answer.get("ok"):
        missing = (answer or {}).get("missing") or []
        raise AscendctlError(f"{access.name}: cannot build {dest}: not in the store: "
                             f"{', '.join(missing[:5])} (run `ascendctl weights push`)")
    return answer
