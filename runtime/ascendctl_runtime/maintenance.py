"""A node out of serving until an operator returns it: `drained` (an operator's
`ascendctl node drain`, or the fault policy's drain) or `isolated` (the fault policy: the
hardware needs looking at). Kept in <root>/health/maintenance.json; only
`ascendctl node undrain` clears it (after re-checking the node).

While a node is in maintenance its serving group leaves the gateway (gateway.py), then the
group's supervisor waits for the in-flight requests and stops the group; no recovery and
no deploy touches it. Every change is an event in <root>/history.jsonl.

Node-call operations (ascendctl/maintenance.py sends them):

    show      the node's maintenance record (or none), its supervisor's and gateway
              watcher's state files
    enter     put the node in maintenance (a more severe state replaces a milder one)
    clear     return it (the record that was cleared)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Literal, Optional, Tuple

from ascendctl_runtime import healthstore, layout
from ascendctl_runtime.nodeutil import answer_call, append_json_line, write_atomic
from ascendctl_runtime.typedjson import ContractError, InvalidField, Record

DRAINED, ISOLATED = "drained", "isolated"
SEVERITY: Dict[str, int] = {DRAINED: 1, ISOLATED: 2}
TEXT_MAX = 2000


@dataclass(frozen=True)
class Maintenance(Record):
    state: Literal["drained", "isolated"]
    since: float                 # epoch seconds, the node's clock
    by: str                      # "operator (user@host)" | "policy"
    reason: str
    key: str = ""                # the policy: the fault code or signal
    evidence: str = ""           # the policy: the raw reading that showed it

    def validate(self) -> None:
        for name in ("by", "reason", "key", "evidence"):
            if len(getattr(self, name)) > TEXT_MAX:
                raise InvalidField(name, f"longer than {TEXT_MAX} characters")
        if not self.reason.strip():
            raise InvalidField("reason", "must say why")

    def describe(self) -> str:
        return f"{self.state} by {self.by} since {iso(self.since)}: {self.reason}"


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def path(root: str) -> str:
    return healthstore.health_path(root, layout.MAINTENANCE_FILE)


def read(root: str) -> Optional[Maintenance]:
    """The node's maintenance, or None. A file that cannot be read as one keeps the node
    out (drained, the reason says why): a damaged file must not put a node back."""
    try:
        with open(path(root), "rb") as handle:
            text = handle.read(64_000)
    except FileNotFoundError:
        return None
    except OSError as err:
        text = b""
        problem = str(err)
    else:
        try:
            return Maintenance.from_json(text, path(root))
        except ContractError as err:
            problem = str(err)
    return Maintenance(state=DRAINED, since=_mtime(path(root)), by="unknown",
                       reason=f"unreadable maintenance file ({problem[:300]}): "
                              "`ascendctl node undrain` clears it")


def _mtime(file: str) -> float:
    try:
        return os.stat(file).st_mtime
    except OSError:
        return time.time()


def _history(root: str, event: Dict[str, Any]) -> None:
    now = time.time()
    append_json_line(os.path.join(root, layout.HISTORY_FILE),
                     {"t": round(now, 3), "time": iso(now), **event})


def enter(root: str, node: str, wanted: Maintenance) -> Tuple[Maintenance, bool]:
    """Put the node in WANTED's state unless it already is in it or a more severe one;
    (the record in force, whether it changed)."""
    current = read(root)
    if current is not None and SEVERITY[current.state] >= SEVERITY[wanted.state]:
        return current, False
    write_atomic(path(root), wanted.to_json().encode(), 0o644)
    _history(root, {"event": wanted.state, "node": node, "by": wanted.by,
                    "reason": wanted.reason, "key": wanted.key or None,
                    "evidence": wanted.evidence or None})
    return wanted, True


def clear(root: str, node: str, by: str) -> Optional[Maintenance]:
    """Return the node to serving; the record that was in force (None: nothing to do)."""
    current = read(root)
    if current is None:
        return None
    os.unlink(path(root))
    _history(root, {"event": "undrained", "node": node, "by": by,
                    "reason": f"was {current.describe()}"})
    return current


# -- node calls ----------------------------------------------------------------------------

def op_show(root: str) -> Dict[str, Any]:
    """The node's maintenance, and what its supervisor (a head) and gateway watcher (the
    gateway) last wrote: what `ascendctl node` waits on."""
    current = read(root)
    return {"maintenance": current.to_dict() if current else None,
            "supervisor": healthstore.read_json(
                healthstore.health_path(root, layout.SUPERVISOR_STATE)),
            "gateway": healthstore.read_json(
                healthstore.health_path(root, layout.GATEWAY_STATE)),
            "time": time.time()}


def op_enter(root: str, node: str, state: str, by: str, reason: str) -> Dict[str, Any]:
    wanted = Maintenance(state=state, since=round(time.time(), 3), by=by,  # type: ignore[arg-type]
                         reason=reason)
    try:
        wanted.validate()
    except InvalidField as err:
        raise ValueError(str(err)) from None
    if state not in SEVERITY:
        raise ValueError(f"state must be one of {', '.join(SEVERITY)}")
    current, changed = enter(root, node, wanted)
    return {"maintenance": current.to_dict(), "changed": changed}


def op_clear(root: str, node: str, by: str) -> Dict[str, Any]:
    cleared = clear(root, node, by)
    return {"cleared": cleared.to_dict() if cleared else None, "changed": cleared is not None}


def run_call(payload: bytes) -> int:
    return answer_call(payload, {"show": op_show, "enter": op_enter, "clear": op_clear})
