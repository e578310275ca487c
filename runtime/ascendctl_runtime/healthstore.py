"""Where the node-side health machinery keeps its state under the deploy root, and the
small files other parties write: the hold file, the watchdog's restart request and the
event log (standard library only; the names are layout.py's).

    <root>/supervisor.hold            a deploy (or an operator) holds recovery until a time
    <root>/history.jsonl              deploy's events (deploys, rollbacks, failed releases)
    <root>/health/events.jsonl        the supervisor's events (every recovery, its cause)
    <root>/health/plan.json           the supervisor's signed plan (head only)
    <root>/health/supervisor.json     the supervisor's state (head only)
    <root>/health/agent.json          what this node's agent did and saw (every node)
    <root>/health/restart-request.json  the HBM watchdog asks for a gang restart
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

from ascendctl_runtime.contract import Hold
from ascendctl_runtime.layout import EVENTS_FILE, HEALTH_DIR, HISTORY_FILE, HOLD_FILE
from ascendctl_runtime.nodeutil import append_json_line, write_atomic
from ascendctl_runtime.typedjson import EXCERPT_CHARS

HOLD_WITHOUT_EXPIRY_S = 3600.0   # a hold file that is not a Hold counts from its mtime


def health_path(root: str, name: str) -> str:
    return os.path.join(root, HEALTH_DIR, name)


def hold_path(root: str) -> str:
    return os.path.join(root, HOLD_FILE)


def read_json(path: str) -> Optional[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: str, data: dict[str, Any], mode: int = 0o644) -> None:
    write_atomic(path, (json.dumps(data, sort_keys=True) + "\n").encode(), mode)


def file_age_s(path: str, now: Optional[float] = None) -> Optional[float]:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return (time.time() if now is None else now) - mtime


def read_hold(root: str, now: Optional[float] = None) -> Optional[Hold]:
    """The hold in force now, if any: the Hold in the file (contract.py), or — a file that
    is not one, e.g. `touch supervisor.hold` — a hold for an hour from its mtime."""
    path = hold_path(root)
    now = time.time() if now is None else now
    try:
        mtime = os.stat(path).st_mtime
        with open(path, "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    try:
        hold = Hold.from_json(text)
    except ValueError as err:
        reason = "" if not text.strip() else f"not a hold file: {err}"[:2 * EXCERPT_CHARS]
        hold = Hold(until=mtime + HOLD_WITHOUT_EXPIRY_S, reason=reason)
    return hold if hold.until > now else None


def write_hold(root: str, seconds: float, by: str, reason: str) -> Hold:
    """Hold recovery for SECONDS from now (this node's clock)."""
    hold = Hold(until=round(time.time() + seconds, 3), by=by, reason=reason)
    write_atomic(hold_path(root), hold.to_json().encode(), 0o644)
    return hold


def release_hold(root: str) -> bool:
    """Remove the hold file; whether there was one."""
    try:
        os.unlink(hold_path(root))
    except FileNotFoundError:
        return False
    return True


def append_event(root: str, event: dict[str, Any]) -> None:
    """One line in <root>/health/events.jsonl. Not in deploy's history.jsonl: a restart
    loop must never push the deploys out of the tail rollback reads."""
    append_json_line(health_path(root, EVENTS_FILE), event)


def _tail_json_lines(path: str, tail: int) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()[-tail:]
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def read_events(root: str, tail: int) -> list[dict[str, Any]]:
    """The last TAIL events of both logs, oldest first (ISO times sort as text)."""
    events = _tail_json_lines(os.path.join(root, HISTORY_FILE), tail) + \
        _tail_json_lines(health_path(root, EVENTS_FILE), tail)
    events.sort(key=lambda e: (str(e.get("time") or ""), float(e.get("t") or 0)))
    return events[-tail:]
