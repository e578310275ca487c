"""What a deploy's switch has done, as an append-only log (`DeployRun.done`).

A step that changes the cluster appends what it did; what later steps and the rescue
need to know (which hosts this run restarts, which it stopped, the PID each started unit
had, what each node served before its commit, which groups are out of the balancer, …)
is read back from the log, never from a set some step mutates. `deploy --json` shows it
(`outcome.done`), in the order it happened.

    restart      host   the switch restarts its engines (decided once, by engine_stop)
    stopped      host   its old engines were stopped
    units        host   the release's unit files were installed (`files`: those changed)
    started      host   one of its units started and came up (`unit`, `pid`, `restarts`)
    forgotten    host   the units started so far no longer count (the rescue restarts it)
    committed    host   `current` set to the release (`previous`: what it pointed at)
    out          group  taken out of the gateway's balancer
    in           group  put back in
    not_serving  group  its restore failed: it stays out
    settled      host   its rollout batch is finished (the rescue leaves it alone)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl.deploy.nodestate import UnitState

KINDS = ("restart", "stopped", "units", "started", "forgotten", "committed", "out", "in",
         "not_serving", "settled")


@dataclass(frozen=True)
class Done:
    kind: str
    subject: str                     # a host, or a serving group (out, in, not_serving)
    at: float
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "t": round(self.at, 3),
                **{k: v for k, v in self.data.items() if k != "state"}}


class SwitchLog:
    """Appended to from the run's worker threads; read as views."""

    def __init__(self) -> None:
        self._records: list[Done] = []
        self._lock = threading.Lock()

    def add(self, kind: str, subjects: Iterable[str], **data: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown switch record {kind!r}")
        now = time.time()
        with self._lock:
            self._records.extend(Done(kind, subject, now, dict(data)) for subject in subjects)

    def records(self) -> list[Done]:
        with self._lock:
            return list(self._records)

    def as_list(self) -> list[dict[str, Any]]:
        return [record.as_dict() for record in self.records()]

    # -- views -----------------------------------------------------------------------------

    def subjects(self, kind: str) -> frozenset[str]:
        return frozenset(r.subject for r in self.records() if r.kind == kind)

    def started(self, host: str) -> dict[str, UnitState]:
        """Each unit of HOST as it was when it came up (since it was last forgotten)."""
        units: dict[str, UnitState] = {}
        for record in self.records():
            if record.subject != host:
                continue
            if record.kind == "forgotten":
                units.clear()
            elif record.kind == "started":
                units[record.data["unit"]] = record.data["state"]
        return units

    def changed_units(self, host: str) -> list[str]:
        """The installed files that changed on HOST (the last install)."""
        found: list[str] = []
        for record in self.records():
            if record.kind == "units" and record.subject == host:
                found = list(record.data["files"])
        return found

    def committed(self) -> dict[str, Optional[str]]:
        """Host → what its `current` pointed at before this run committed it."""
        return {r.subject: r.data["previous"] for r in self.records() if r.kind == "committed"}

    def out_of_balancer(self) -> frozenset[str]:
        """Groups this run took out of the balancer and has not put back."""
        out: set[str] = set()
        for record in self.records():
            if record.kind == "out":
                out.add(record.subject)
            elif record.kind == "in":
                out.discard(record.subject)
        return frozenset(out)


class Subjects:
    """A read-only attribute of an object with a `done` log: the subjects of its records of
    one kind (`restarting = Subjects("restart")`)."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown switch record {kind!r}")
        self.kind = kind

    def __get__(self, owner: Any, owner_type: Any = None) -> frozenset[str]:
        return owner.done.subjects(self.kind)


def started_record(unit: str, state: UnitState) -> dict[str, Any]:
    """The data of a `started` record: the unit and its state (the readiness gate's
    baseline); the state itself is kept for the views, its PID and restarts shown."""
    return {"unit": unit, "state": state, "pid": state.main_pid, "restarts": state.restarts}
