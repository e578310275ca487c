"""The deploy's hold on the head's gang supervisor (docs/health.md), one shipped call each
(ascendctl/deploy/playbook_modules/supervisor.py). Standard library only.

    hold     write <root>/supervisor.hold (healthstore.write_hold): the supervisor only
             observes until now + SECONDS, on this node's clock, the one the supervisor
             judges the hold by
    release  remove it, then wait at most WAIT_S until the supervisor has published a
             state, written after the removal, that is no longer held (so `status` right
             after a deploy reads the truth)
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict

from ascendctl_runtime import healthstore, layout
from ascendctl_runtime.nodeutil import answer_call

POLL_S = 0.5


def op_hold(root: str, seconds: float, by: str, reason: str) -> dict[str, Any]:
    return {"hold": healthstore.write_hold(root, float(seconds), by, reason).to_dict()}


def _unheld_since(state_path: str, since: float) -> bool:
    try:
        fresh = os.stat(state_path).st_mtime > since
    except OSError:
        return False
    return fresh and not (healthstore.read_json(state_path) or {}).get("held")


def op_release(root: str, wait_s: float) -> dict[str, Any]:
    removed = healthstore.release_hold(root)
    since = time.time()
    state_path = healthstore.health_path(root, layout.SUPERVISOR_STATE)
    deadline = since + float(wait_s)
    while not _unheld_since(state_path, since):
        if time.time() >= deadline:
            return {"removed": removed, "acknowledged": False}
        time.sleep(POLL_S)
    return {"removed": removed, "acknowledged": True}


OPERATIONS: Dict[str, Callable[..., Dict[str, Any]]] = {"hold": op_hold, "release": op_release}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)
