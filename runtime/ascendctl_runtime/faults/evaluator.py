"""Readings over time → actions: each rule of the policy table acts once per fault episode,
after its persistence, and the episode ends when the fault has been absent for the table's
`clear_after_readings` readings.

Each call to `step` is one full reading of the node: a key (with its subject) not observed
in it is absent at that time. What counts toward a window (`readings` within `window_s`) is
an occurrence: a LEVEL observation's rising edge (absent → present), or an EVENT's count.
Consecutive `readings` and `for_s` count readings in which the key is present.

`snapshot()` and `restore()` carry the open episodes over a restart of the caller: a rule
is named by its action and the key (a code sits at most once under each action).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterable, List, Optional, Tuple

from ascendctl_runtime.faults.policy import ACTIONS, PolicyTable, Rule
from ascendctl_runtime.faults.signals import EVENT, Observation


@dataclass(frozen=True)
class Action:
    action: str              # alert | restart | drain | isolate
    key: str                 # the fault code or signal
    subject: str             # npu3, port3, node
    at: float
    reason: str
    source: str              # where the rule's default comes from
    rule: str                # file:line of the rule


class _Seen:
    __slots__ = ("detail", "level", "events")

    def __init__(self, detail: str) -> None:
        self.detail = detail
        self.level = False
        self.events = 0


class _Track:
    __slots__ = ("run", "run_start", "events", "fired", "quiet", "present")

    def __init__(self) -> None:
        self.run = 0
        self.run_start = 0.0
        self.events: Deque[Tuple[float, int]] = deque()
        self.fired = False
        self.quiet = 0
        self.present = False

    def idle(self) -> bool:
        return not self.fired and not self.run and not self.events


class Evaluator:
    def __init__(self, table: PolicyTable) -> None:
        self.table = table
        self._tracks: Dict[Tuple[Rule, str, str], _Track] = {}
        self._last: Optional[float] = None

    def snapshot(self) -> Dict[str, Any]:
        return {"last": self._last, "tracks": [
            [rule.action, key, subject, t.run, t.run_start, [list(e) for e in t.events], t.fired, t.quiet, t.present]
            for (rule, key, subject), t in self._tracks.items()]}

    def restore(self, data: Dict[str, Any]) -> None:
        """The state of a snapshot (of the same or an edited table: a rule no longer in it is
        dropped). Raises TypeError, ValueError or KeyError when DATA is not a snapshot."""
        tracks: Dict[Tuple[Rule, str, str], _Track] = {}
        for action, key, subject, run, run_start, events, fired, quiet, present in data["tracks"]:
            rule = next((r for r in self.table.rules_for(str(key)) if r.action == action), None)
            if rule is None:
                continue
            track = _Track()
            track.run, track.run_start, track.quiet = int(run), float(run_start), int(quiet)
            track.events = deque((float(at), int(n)) for at, n in events)
            track.fired, track.present = bool(fired), bool(present)
            tracks[(rule, str(key), str(subject))] = track
        last = data["last"]
        self._tracks, self._last = tracks, None if last is None else float(last)

    def step(self, at: float, observations: Iterable[Observation]) -> List[Action]:
        if self._last is not None and at < self._last:
            raise ValueError(f"reading at {at} is older than the previous one at {self._last}")
        self._last = at
        seen: Dict[Tuple[str, str], _Seen] = {}
        for obs in observations:
            entry = seen.setdefault((obs.key, obs.subject), _Seen(obs.detail))
            if obs.kind == EVENT:
                entry.events += obs.count
            else:
                entry.level = True
        actions: List[Action] = []
        present = set()
        for (key, subject), entry in seen.items():
            for rule in self.table.rules_for(key):
                if rule.action == "ignore":
                    continue
                ident = (rule, key, subject)
                present.add(ident)
                track = self._tracks.setdefault(ident, _Track())
                occurrences = entry.events + (1 if entry.level and not track.present else 0)
                if self._observe(track, rule, at, occurrences):
                    actions.append(Action(rule.action, key, subject, at,
                                          f"{key} on {subject}: {rule.persistence.describe()}"
                                          + (f" ({entry.detail})" if entry.detail else ""),
                                          rule.source, rule.where))
        for ident in list(self._tracks):
            if ident not in present:
                track = self._tracks[ident]
                self._absent(track, ident[0], at)
                if track.idle():
                    del self._tracks[ident]
        actions.sort(key=lambda a: (-ACTIONS.index(a.action), a.key, a.subject))
        return actions

    def _observe(self, track: _Track, rule: Rule, at: float, occurrences: int) -> bool:
        """Record a reading with the key present; True when the rule fires now."""
        if track.run == 0:
            track.run_start = at
        track.run += 1
        track.quiet = 0
        track.present = True
        persistence = rule.persistence
        if persistence.window_s is not None:
            if occurrences > 0:
                track.events.append((at, occurrences))
            self._prune(track, at, persistence.window_s)
        if track.fired:
            return False
        if persistence.for_s is not None:
            due = at - track.run_start >= persistence.for_s
        elif persistence.window_s is not None:
            due = sum(n for _, n in track.events) >= persistence.readings
        else:
            due = track.run >= persistence.readings
        track.fired = due
        return due

    def _absent(self, track: _Track, rule: Rule, at: float) -> None:
        track.run = 0
        track.present = False
        track.quiet += 1
        if rule.persistence.window_s is not None:
            self._prune(track, at, rule.persistence.window_s)
        if track.fired and track.quiet >= self.table.clear_after_readings:
            track.fired = False
            track.events.clear()

    @staticmethod
    def _prune(track: _Track, at: float, window: float) -> None:
        while track.events and track.events[0][0] <= at - window:
            track.events.popleft()
