"""The engine's progress from its /metrics: requests running and the generation counter.

The read is bounded: at most MAX_METRICS_BYTES, and the whole answer within `timeout`
seconds. No answer within the timeout is told apart from a refused connection: a stopped
(SIGSTOP) or wedged engine still accepts connections but answers nothing, while a
restarting one refuses them.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from ascendctl_runtime.faults.signals import EngineProgress
from ascendctl_runtime.probe import parse_metrics

MAX_METRICS_BYTES = 4 * 1024 * 1024
RUNNING = "vllm:num_requests_running"
GENERATION = "vllm:generation_tokens_total"
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ProgressAnswer:
    progress: Optional[EngineProgress]
    error: str = ""              # why there is no progress
    unanswered: bool = False     # no answer within the timeout (not a refusal)
    evidence: str = ""           # the metric lines read


def _body(url: str, timeout: float) -> bytes:
    """The body of GET url, all of it within `timeout` seconds (socket.timeout if not)."""
    parts = urllib.parse.urlsplit(url)
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = time.monotonic() + timeout
    connection = connection_class(parts.hostname or "", parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        if response.status != 200:
            raise ValueError(f"answered HTTP {response.status}")
        data = b""
        while len(data) <= MAX_METRICS_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")      # noqa: UP041 (not TimeoutError before 3.10)
            if connection.sock is not None:
                connection.sock.settimeout(left)
            piece = response.read(_CHUNK)
            if not piece:
                return data
            data += piece
        raise ValueError(f"answered more than {MAX_METRICS_BYTES} bytes")
    finally:
        connection.close()


def read_progress(url: str, timeout: float) -> ProgressAnswer:
    try:
        body = _body(url, timeout).decode("utf-8", "replace")
    except (socket.timeout, TimeoutError):     # noqa: UP041 (one class only from 3.10)
        return ProgressAnswer(None, f"{url}: no answer within {timeout:g} s", unanswered=True)
    except (OSError, ValueError, http.client.HTTPException) as err:
        return ProgressAnswer(None, f"{url}: {type(err).__name__}: {err}"[:300])
    totals = parse_metrics(body, (RUNNING, GENERATION))
    missing = [name for name in (RUNNING, GENERATION) if name not in totals]
    if missing:
        return ProgressAnswer(None, f"{url}: no {' or '.join(missing)}")
    evidence = "\n".join(line for line in body.splitlines()
                         if line.startswith((RUNNING, GENERATION)))[:500]
    return ProgressAnswer(EngineProgress(int(totals[RUNNING]), int(totals[GENERATION])),
                          evidence=evidence)
