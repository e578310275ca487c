"""The node's fault monitor: each `step()` is one reading (gather.py) turned into
observations (signals.py, against the previous counters), then into the actions due now
(evaluator.py), returned as `FaultEvent`s.

With a single serving group there is nowhere to move its traffic: drain and isolate
become alert (`degraded_from` keeps the table's action), and `view()` says so.

State under the deploy root, so that a restart of the agent neither fires again on log
lines it has read nor counts a counter's jump twice:

    <root>/health/faults-state.json   previous counters, log offsets, open episodes
    <root>/health/fault-events.json   the last `events_kept` events
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from ascendctl_runtime import healthstore
from ascendctl_runtime.contract import FaultsConfig
from ascendctl_runtime.faults import signals as sig
from ascendctl_runtime.faults.evaluator import Action, Evaluator
from ascendctl_runtime.faults.evidence import evidence
from ascendctl_runtime.faults.gather import Gatherer, Reading, Runner
from ascendctl_runtime.faults.link import LinkStat
from ascendctl_runtime.faults.npu_ecc import EccReading
from ascendctl_runtime.faults.policy import table_from_dict
from ascendctl_runtime.layout import FAULT_EVENTS, FAULTS_CONFIG, FAULTS_STATE
from ascendctl_runtime.npu import run_tool

STATE_FORMAT = 1
MAX_STATE_BYTES = 8 * 1024 * 1024
VIEW_EVENTS = 20
CANNOT_MOVE = ("drain", "isolate")
ONE_GROUP = "only one serving group: drain and isolate act as alert"


@dataclass(frozen=True)
class FaultEvent:
    time: float
    key: str
    subject: str
    action: str                   # what is to be done: the table's action, or alert (one group)
    policy_action: str            # the table's action
    source: str                   # where the rule's default comes from
    rule: str                     # file:line of the rule
    detail: str
    evidence: str                 # the raw line(s) that showed the fault
    degraded_from: Optional[str] = None
    note: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def effective(action: str, serving_groups: int) -> Tuple[str, Optional[str], str]:
    """(the action to take, the table's action when it could not be taken, a note)."""
    if serving_groups < 2 and action in CANNOT_MOVE:
        return "alert", action, f"only one serving group: cannot {action}"
    return action, None, ""


def _bounded_read(path: str) -> Optional[Dict[str, Any]]:
    try:
        if os.stat(path).st_size > MAX_STATE_BYTES:
            return None
    except OSError:
        return None
    return healthstore.read_json(path)


class FaultMonitor:
    def __init__(self, config: FaultsConfig, run: Runner = run_tool, clock: Callable[[], float] = time.time,
                 own_pids: Optional[Callable[[], Iterable[int]]] = None) -> None:
        """`own_pids`: the engine's processes (HBM held by any other is `hbm.foreign`);
        None: not known, hbm.foreign is not looked at. Raises PolicyError for a bad table."""
        self.config = config
        self.table = table_from_dict(config.policy, FAULTS_CONFIG)
        self.evaluator = Evaluator(self.table)
        self.gatherer = Gatherer(config, run)
        self.clock, self.own_pids = clock, own_pids
        self.state_path = healthstore.health_path(config.root, FAULTS_STATE)
        self.events_path = healthstore.health_path(config.root, FAULT_EVENTS)
        self.ecc: Dict[int, EccReading] = {}
        self.link_stats: Dict[int, LinkStat] = {}
        self.progress: Optional[sig.EngineProgress] = None
        self.metrics_answered = False
        self.since: Dict[Tuple[str, str], float] = {}
        self.present: List[sig.Observation] = []
        self.last_at: Optional[float] = None
        self.errors: List[str] = []
        self.own: FrozenSet[int] = frozenset()      # the engine's processes at the last reading
        events = (_bounded_read(self.events_path) or {}).get("events")
        self.events: List[Dict[str, Any]] = [e for e in events if isinstance(e, dict)][-config.events_kept:] \
            if isinstance(events, list) else []
        self._restore(_bounded_read(self.state_path))

    # -- one reading -------------------------------------------------------------------

    def step(self) -> List[FaultEvent]:
        at = self.clock()
        if self.last_at is not None and at < self.last_at:
            at = self.last_at              # the wall clock stepped back: hold it
        reading = self.gatherer.read(at)
        observations = self._observe(reading)
        events = [self._event(action, reading) for action in self.evaluator.step(at, observations)]
        self.since = {(o.key, o.subject): self.since.get((o.key, o.subject), at) for o in observations}
        self.present, self.errors, self.last_at = observations, reading.errors, at
        if events:
            self.events = (self.events + [e.to_dict() for e in events])[-self.config.events_kept:]
            healthstore.write_json(self.events_path, {"events": self.events})
        healthstore.write_json(self.state_path, self._state())
        return events

    def _observe(self, reading: Reading) -> List[sig.Observation]:
        obs: List[sig.Observation] = []
        for npu, health in reading.health.items():
            obs += sig.from_health(npu, health)
        for npu, ecc in reading.ecc.items():
            obs += sig.from_ecc(npu, self.ecc.get(npu), ecc)
            self.ecc[npu] = ecc
        for npu, temperature in reading.temperature.items():
            obs += sig.from_temperature(npu, temperature, self.table.temp_high_c)
        for port, link in reading.links.items():
            obs += sig.from_link(port, link)
        for port, stat in reading.link_stats.items():
            obs += sig.from_link_stat(port, self.link_stats.get(port), stat)
            self.link_stats[port] = stat
        obs += sig.from_log("node", (hit.code for hit in reading.log_hits))
        obs += self._progress(reading)
        obs += self._holders(reading)
        return obs

    def _progress(self, reading: Reading) -> List[sig.Observation]:
        answer = reading.progress
        if answer is None:
            return []
        if answer.progress is not None:
            found = sig.from_progress(self.progress, answer.progress)
            self.progress, self.metrics_answered = answer.progress, True
            return found
        reading.errors.append(answer.error)
        if answer.unanswered and self.metrics_answered:
            # a stopped or wedged engine accepts the connection and answers nothing
            return [sig.Observation("engine.stall", "node", sig.LEVEL, detail="metrics unanswered")]
        if not answer.unanswered:
            self.metrics_answered = False      # refused: stopped or starting, the supervisor's part
        return []

    def _holders(self, reading: Reading) -> List[sig.Observation]:
        if self.own_pids is None or not reading.holders:
            return []
        try:
            self.own = frozenset(self.own_pids())
        except (OSError, ValueError) as err:
            reading.errors.append(f"the engine's processes: {err}"[:300])
            return []
        return [o for npu, holders in reading.holders.items() for o in sig.from_hbm_holders(npu, holders, self.own)]

    def _event(self, action: Action, reading: Reading) -> FaultEvent:
        taken, degraded_from, note = effective(action.action, self.config.serving_groups)
        return FaultEvent(action.at, action.key, action.subject, taken, action.action, action.source,
                          action.rule, action.reason, evidence(action.key, action.subject, reading, self.own),
                          degraded_from, note)

    # -- what the agent shows ----------------------------------------------------------

    def view(self) -> Dict[str, Any]:
        return {
            "node": self.config.node,
            "last_reading": self.last_at,
            "interval_s": self.config.interval_s,
            "serving_groups": self.config.serving_groups,
            "limits": ONE_GROUP if self.config.serving_groups < 2 else None,
            "gather_errors": list(self.errors),
            "observations": [{"key": o.key, "subject": o.subject, "kind": o.kind, "count": o.count,
                              "detail": o.detail, "since": self.since.get((o.key, o.subject))}
                             for o in self.present],
            "events": self.events[-VIEW_EVENTS:],
        }

    # -- state over restarts -----------------------------------------------------------

    def _state(self) -> Dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "last_at": self.last_at,
            "ecc": {str(npu): dataclasses.asdict(ecc) for npu, ecc in self.ecc.items()},
            "link_stats": {str(port): [s.device, s.up_count, s.down_count] for port, s in self.link_stats.items()},
            "progress": None if self.progress is None else [self.progress.running, self.progress.generation],
            "metrics_answered": self.metrics_answered,
            "logs": self.gatherer.logs.state(),
            "since": [[key, subject, at] for (key, subject), at in self.since.items()],
            "evaluator": self.evaluator.snapshot(),
        }

    def _restore(self, state: Optional[Dict[str, Any]]) -> None:
        if state is None or state.get("format") != STATE_FORMAT:
            return
        parts: Dict[str, Callable[[Any], None]] = {
            "last_at": self._restore_last, "ecc": self._restore_ecc, "link_stats": self._restore_links,
            "progress": self._restore_progress, "logs": self.gatherer.logs.restore,
            "since": self._restore_since, "evaluator": self.evaluator.restore}
        for name, restore in parts.items():
            try:
                restore(state[name])
            except (TypeError, ValueError, KeyError, AttributeError) as err:
                self.errors.append(f"{FAULTS_STATE}: {name} unusable ({type(err).__name__}), started afresh")
        self.metrics_answered = state.get("metrics_answered") is True

    def _restore_last(self, value: Any) -> None:
        self.last_at = None if value is None else float(value)

    def _restore_ecc(self, value: Dict[str, Any]) -> None:
        def counts(fields: Dict[str, Any]) -> Dict[str, Any]:
            return {k: None if v is None else int(v) for k, v in fields.items()}
        self.ecc = {int(npu): EccReading(**counts(fields)) for npu, fields in value.items()}

    def _restore_links(self, value: Dict[str, Any]) -> None:
        self.link_stats = {int(port): LinkStat(int(device), "", int(up), None if down is None else int(down), ())
                           for port, (device, up, down) in value.items()}

    def _restore_progress(self, value: Any) -> None:
        self.progress = None if value is None else sig.EngineProgress(int(value[0]), int(value[1]))

    def _restore_since(self, value: List[Any]) -> None:
        self.since = {(str(key), str(subject)): float(at) for key, subject, at in value}

