"""The child process that searches the quality gate's regular expressions (standard library
only; run as `python -I -S prompt_regex_child.py` by ascendctl/inventory/prompt_regex.py).

It says {"ready": true} once it runs; then, for each JSON request on a line of stdin,
{"pattern": ..., "text": ...}, one JSON answer on a line of stdout: {"matched": bool} or
{"error": reason}. A search that runs into
catastrophic backtracking never answers: the controller kills this process at the
deadline and starts another one for the next pattern.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MEMORY_LIMIT = 1 << 30          # address space: a runaway search fails, the host is fine
ERROR_CHARS = 200


def answer(request: Any) -> dict[str, Any]:
    try:
        return {"matched": re.search(request["pattern"], request["text"]) is not None}
    except (re.error, RecursionError, OverflowError, MemoryError, ValueError, TypeError,
            KeyError) as err:
        return {"error": f"{type(err).__name__}: {err}"[:ERROR_CHARS]}


def limit_memory() -> None:
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def serve(requests: Any, answers: Any) -> None:
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError as err:
            reply = {"error": f"bad request: {err}"[:ERROR_CHARS]}
        else:
            reply = answer(request)
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


if __name__ == "__main__":
    limit_memory()
    serve(sys.stdin, sys.stdout)
