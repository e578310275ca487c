"""What the node-side modules share: atomic writes, reading back the EnvironmentFiles
ascendctl writes, tailing a log, and answering one shipped call (standard library only).

The controller ships these modules with each call (ascendctl/transport/nodecall.py), so
they work on a node where nothing is installed yet."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

ENV_ESCAPED = '"\\`$'     # what systemd unescapes after a backslash inside double quotes


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write PATH whole or not at all (a temporary file in its directory, fsync, rename)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def parse_env_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile lines as ascendctl writes them (double-quoted values)."""
    values: dict[str, str] = {}
    for raw in text.split("\n"):      # not splitlines(): systemd splits on newlines only
        line = raw.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            out, i, body = [], 0, value[1:-1]
            while i < len(body):
                if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in ENV_ESCAPED:
                    out.append(body[i + 1])
                    i += 2
                else:
                    out.append(body[i])
                    i += 1
            value = "".join(out)
        values[key.strip()] = value
    return values


def tail_file(path: str, lines: int, max_bytes: int) -> str:
    """The last LINES lines of PATH, reading at most its last MAX_BYTES bytes."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        data = handle.read().decode("utf-8", "replace")
    kept = data.splitlines()[-lines:]
    return "\n".join(kept) + ("\n" if kept else "")


def answer_call(payload: bytes, operations: dict[str, Callable[..., dict[str, Any]]]) -> int:
    """Run {"op", "kwargs"} from PAYLOAD and print its result, or {"error"}, as one JSON
    line (the controller reads the last line); the exit status says which."""
    request = json.loads(payload)
    try:
        result = operations[request["op"]](**request.get("kwargs", {}))
    except (OSError, ValueError, TypeError, KeyError) as err:
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}))
        return 1
    print(json.dumps(result))
    return 0
