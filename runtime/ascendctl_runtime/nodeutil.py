"""What the node-side modules share: atomic writes, reading back the EnvironmentFiles
ascendctl writes, tailing a log, answering one shipped call, and joining an address with
a port (standard library only).

The controller ships these modules with each call (ascendctl/transport/nodecall.py), so
they work on a node where nothing is installed yet. The controller imports host_port and
http_url from here too: one definition for nginx, Prometheus, the agents and the probe."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Optional

ENV_ESCAPED = '"\\`$'     # what systemd unescapes after a backslash inside double quotes


def host_port(host: str, port: int) -> str:
    """HOST and PORT as one `host:port`: an IPv6 address in brackets ([2001:db8::1]:8000),
    an IPv4 address or a host name as it is (198.18.0.1:8000, node0:8000). A zone id
    stays as written ([fe80::1%eth0]:8000, as Python's and Go's parsers read it).

    HOST is a bare address (the inventory refuses brackets); a bracketed one is refused
    here rather than bracketed twice. Not for ssh's `user@host` (it takes the bare
    address and the port separately) nor for vLLM's --data-parallel-address and
    --master-addr (bare addresses: vLLM adds the brackets itself)."""
    if not host or host.startswith("[") or host.endswith("]"):
        raise ValueError("host_port needs a bare host name or address")
    number = int(port)
    if not 0 < number < 65536:
        raise ValueError("port must be 1..65535")
    return f"[{host}]:{number}" if ":" in host else f"{host}:{number}"


def host_port_text(host: str, port: int) -> str:
    """host_port for a message naming an address nobody validated (an ssh_config HostName,
    a playbook's value): what host_port makes of it, else HOST:PORT as given."""
    try:
        return host_port(host, port)
    except (TypeError, ValueError):
        return f"{host}:{port}"


def http_url(host: str, port: int, path: str = "") -> str:
    """`http://host:port/path` with host_port's brackets (http://[2001:db8::1]:8000/v1)."""
    if path and not path.startswith("/"):
        raise ValueError("a URL path starts with /")
    return "http://" + host_port(host, port) + path


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


def append_json_line(path: str, event: dict[str, Any]) -> None:
    """EVENT as one line at the end of PATH (an event log), flushed to disk."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    line = json.dumps(event, sort_keys=True) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


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


def fetch_json(url: str, timeout: float, limit: int = 4_000_000) -> Optional[dict[str, Any]]:
    """The JSON object at URL (GET, at most LIMIT bytes), or None when it does not answer
    or answers something else."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = json.loads(response.read(limit))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def say(component: str, message: str) -> None:
    """One line on stderr (the unit's journal), as `ascendctl-<component>: <message>`."""
    import sys

    print(f"ascendctl-{component}: {message}", file=sys.stderr, flush=True)


def repeat(stop: Any, interval_s: float, step: Callable[[], Any], component: str) -> None:
    """STEP every INTERVAL_S seconds until STOP (a threading.Event) is set; an exception
    is one journal line, never the end of the loop (a node's watcher must keep running)."""
    while not stop.is_set():
        try:
            step()
        except Exception as err:  # noqa: BLE001
            say(component, f"step failed: {type(err).__name__}: {err}")
        stop.wait(interval_s)
