"""Gang recovery of the serving group, run on the head node (no controller needed).

    python3 -m ascendctl_runtime.supervisor <release>/supervisor.json

A serving group is one unit. Every tick the supervisor reads each rank's state from its
node agent (GET /health/state), proves serving with a real 1-token completion through
the API key, and decides. When a rank's engine crashed (or never started since its node
booted), the HBM watchdog asked for a restart, or the group fails the probe for
`probe_failure_s`, it restarts the whole group through a signed plan the agents follow:

    stopping   every rank stops its engine units (a rank that is unreachable is waited for)
    npus       every rank's NPUs hold no process (HBM free)
    backoff    a retry waits (backoff_s doubling, at most backoff_max_s)
    starting   the units start in rank order, each one started (up and settled, or the head
               listening on the coordination port) within rank_start_wait_s before the next
    warming    the probe must pass within startup_timeout_s
    serving    recovered

An attempt that fails (a rank crashes during start, a timeout) is retried with back-off; after
max_attempts the group is stopped and stays down (`gave-up`) with the reason, until it is
seen serving again (a redeploy). A rank whose node is in maintenance (maintenance.py)
takes the group out of service instead (maintenance_phase.py) until the node returns. A
rank stopped on purpose (`systemctl stop`, Result=success) is never restarted; a hold file (<root>/supervisor.hold) holds every action until it
expires. Every recovery is an event in <root>/history.jsonl and a line in the journal.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from ascendctl_runtime import engine_state as es
from ascendctl_runtime import gangplan, gangrules, healthstore, layout, maintenance_phase, probe
from ascendctl_runtime.contract import SupervisorConfig
from ascendctl_runtime.nodeutil import fetch_json

SERVING, STOPPING, NPUS, BACKOFF, STARTING, WARMING, GAVE_UP, MAINTENANCE = (
    "serving", "stopping", "npus", "backoff", "starting", "warming", "gave-up", "maintenance")
RECOVERING = (STOPPING, NPUS, BACKOFF, STARTING, WARMING)
ACTIVE_STATES = (es.RUNNING, es.STARTING, es.STOPPING)
HANDLED_REQUESTS_KEPT = 20


@dataclass
class SupervisorState:
    """Persisted in <root>/health/supervisor.json (and read by `ascendctl status`)."""

    release: str = ""
    generation: int = 0
    phase: str = SERVING
    phase_since: float = 0.0
    attempt: int = 0
    max_attempts: int = 0
    cause: Optional[str] = None
    cause_node: Optional[str] = None
    cause_rank: Optional[int] = None
    detected_at: Optional[float] = None      # when the failure was first seen
    step_index: int = -1
    step_since: float = 0.0
    not_before: Optional[float] = None
    last_error: Optional[str] = None
    gave_up_reason: Optional[str] = None
    recoveries_total: int = 0
    last_recovery: Optional[dict[str, Any]] = None
    healthy_since: Optional[float] = None
    failing_since: Optional[float] = None
    probe: dict[str, Any] = field(default_factory=dict)
    handled_requests: list[str] = field(default_factory=list)
    paused: Optional[str] = None             # why the supervisor does not act right now
    manual: Optional[str] = None             # a rank was stopped by hand: hands off until
    #                                          the group is seen serving again
    held: Optional[dict[str, Any]] = None
    waiting_for: list[str] = field(default_factory=list)
    ranks: dict[str, Any] = field(default_factory=dict)
    updated: float = 0.0
    error: Optional[str] = None
    maintenance_step: Optional[str] = None   # gateway | drain | stopped (maintenance_phase.py)
    quiet_readings: int = 0                  # drain: readings in a row with nothing in flight

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "SupervisorState":
        if not isinstance(data, dict):
            return cls()
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def fetch_state(url: str, timeout: float) -> Optional[dict[str, Any]]:
    return fetch_json(url, timeout)


class Io:
    """Everything the supervisor does outside itself (replaced in unit tests)."""

    def __init__(self, config: SupervisorConfig):
        self.config = config
        self.engine = probe.Engine("127.0.0.1", config.probe_port,
                                   probe.read_api_key(config.secrets_file),
                                   config.probe_timeout_s)
        self.pool = ThreadPoolExecutor(max_workers=max(2, len(config.ranks)))

    def rank_states(self) -> dict[str, Optional[dict[str, Any]]]:
        futures = {r.node: self.pool.submit(fetch_state, r.state_url,
                                            self.config.state_timeout_s)
                   for r in self.config.ranks}
        return {node: future.result() for node, future in futures.items()}

    def probe(self) -> dict[str, Any]:
        return probe.serving_probe(self.engine, self.config.probe_model)

    def generation_tokens(self) -> Optional[float]:
        quick = probe.Engine("127.0.0.1", self.config.probe_port, None,
                             min(3.0, self.config.probe_timeout_s))
        return probe.generation_tokens(quick)

    def in_flight(self) -> Optional[float]:
        quick = probe.Engine("127.0.0.1", self.config.probe_port, None,
                             min(3.0, self.config.probe_timeout_s))
        return probe.in_flight(quick)

    def gateway_out(self) -> Optional[bool]:
        """Whether the gateway watcher has this group out of the balancer (None: there is
        no gateway, or it does not answer)."""
        if not self.config.gateway_state_url:
            return None
        view = fetch_state(self.config.gateway_state_url, self.config.state_timeout_s)
        if view is None:
            return None
        return self.config.group in (view.get("out") or [])


class Supervisor:
    def __init__(self, config: SupervisorConfig, io: Any, *,
                 clock: Callable[[], float] = time.time, token: Optional[bytes] = None,
                 emit: Optional[Callable[[dict[str, Any]], None]] = None):
        self.config = config
        self.io = io
        self.clock = clock
        self.token = token if token is not None else gangplan.read_token(config.secrets_file)
        self.state_path = healthstore.health_path(config.root, layout.SUPERVISOR_STATE)
        self.plan_path = healthstore.health_path(config.root, layout.PLAN_FILE)
        self.emit = emit or self._append_event
        self.state = self._load_state()
        self.last_probe_at = float("-inf")
        self.last_tokens: Optional[float] = None
        self.plan: Optional[gangplan.Plan] = None
        self.started_at = clock()

    # -- persistence -------------------------------------------------------------------

    def _load_state(self) -> SupervisorState:
        state = SupervisorState.from_dict(healthstore.read_json(self.state_path))
        if state.release != self.config.release:
            # A new release (a deploy started us): its own attempts, the old generation
            # numbers continue so that agents never see one go backwards.
            state = SupervisorState(release=self.config.release,
                                    generation=state.generation + 1,
                                    recoveries_total=0, phase_since=self.clock())
        return state

    def save(self) -> None:
        self.state.updated = self.clock()
        healthstore.write_json(self.state_path, self.state.to_dict())

    def publish(self, plan: gangplan.Plan) -> None:
        self.plan = plan
        if not self.token:
            self.state.error = (f"no {gangplan.TOKEN_KEY} in {self.config.secrets_file}: no "
                                "plan can be signed, recovery is off")
            return
        healthstore.write_json(self.plan_path, gangplan.sign(plan, self.token))

    def withdraw_plan(self) -> None:
        try:
            os.unlink(self.plan_path)
        except OSError:
            pass

    def _append_event(self, event: dict[str, Any]) -> None:
        healthstore.append_event(self.config.root, event)

    # -- events ------------------------------------------------------------------------

    def event(self, stage: str, **data: Any) -> None:
        now = self.clock()
        record = {"event": "recovery", "stage": stage, "cluster": self.config.cluster,
                  "release": self.config.release, "generation": self.state.generation,
                  "attempt": self.state.attempt, "cause": self.state.cause,
                  "node": self.state.cause_node, "rank": self.state.cause_rank,
                  "t": round(now, 3),
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), **data}
        try:
            self.emit(record)
        except OSError as err:
            log(f"cannot record the event: {err}")
        details = " ".join(f"{k}={json.dumps(v)}" for k, v in record.items()
                           if k not in ("event", "stage", "cluster", "release", "time", "t")
                           and v is not None)
        log(f"recovery {stage}: {details}")

    # -- the plan ----------------------------------------------------------------------

    def make_plan(self, action: str, start_upto: int = -1) -> gangplan.Plan:
        return gangplan.Plan(cluster=self.config.cluster, release=self.config.release,
                             generation=self.state.generation, action=action,
                             steps=tuple(self.config.steps), start_upto=start_upto,
                             handled_requests=tuple(self.state.handled_requests),
                             issued=self.clock(), note=self.state.phase)

    # -- observing ---------------------------------------------------------------------

    def run_probe(self, now: float, force: bool = False) -> dict[str, Any]:
        if force or now - self.last_probe_at >= self.config.probe_interval_s:
            result = self.io.probe()
            result["at"] = now
            self.last_probe_at = now
            if not result["ok"]:
                tokens = self.io.generation_tokens()
                result["busy"] = tokens is not None and self.last_tokens is not None \
                    and tokens > self.last_tokens
                self.last_tokens = tokens if tokens is not None else self.last_tokens
            else:
                self.last_tokens = None
            self.state.probe = result
        return self.state.probe

    def assess(self, views: dict[str, Optional[dict[str, Any]]]) -> dict[str, Any]:
        """Per rank what is wrong, and the first reason to restart the group (pure)."""
        cause: Optional[tuple[str, str, int]] = None
        paused: Optional[str] = None
        manual: Optional[str] = None
        unreachable: list[str] = []
        transitional: list[str] = []
        requests: list[dict[str, Any]] = []
        summary: dict[str, Any] = {}
        maintenance: Optional[tuple[str, int, dict[str, Any]]] = None
        for spec in self.config.ranks:
            view = views.get(spec.node)
            if view is None:
                unreachable.append(spec.node)
                summary[spec.node] = {"rank": spec.rank, "reachable": False}
                continue
            if isinstance(view.get("maintenance"), dict) and maintenance is None:
                maintenance = (spec.node, spec.rank, view["maintenance"])
            units = view.get("units") or {}
            summary[spec.node] = {"rank": spec.rank, "reachable": True,
                                  "release": view.get("release"),
                                  "units": {u: (units.get(u) or {}).get("state")
                                            for u in spec.units}}
            if view.get("release") != self.config.release:
                paused = paused or (f"rank {spec.rank} ({spec.node}) runs release "
                                    f"{view.get('release')}, the supervisor "
                                    f"{self.config.release}")
                continue
            for unit in spec.units:
                info = units.get(unit) or {}
                state = info.get("state")
                where = f"rank {spec.rank} ({spec.node})"
                if state == es.CRASHED:
                    line = f": {info['journal']}" if info.get("journal") else ""
                    cause = cause or (f"{where}: {unit} crashed ({info.get('exit') or 'failed'})"
                                      f"{line}", spec.node, spec.rank)
                elif state == es.NOT_STARTED:
                    cause = cause or (f"{where}: {unit} not running since the node booted",
                                      spec.node, spec.rank)
                elif state == es.STOPPED and info.get("stopped_by_plan") is not None:
                    cause = cause or (f"{where}: {unit} stopped by recovery generation "
                                      f"{info['stopped_by_plan']}", spec.node, spec.rank)
                elif state == es.STOPPED:
                    manual = manual or (f"{where}: {unit} was stopped on purpose "
                                        "(systemctl stop, not a crash)")
                elif state == es.MISSING:
                    paused = paused or f"{where}: {unit} is not installed"
                elif state in (es.STARTING, es.STOPPING):
                    transitional.append(f"{where}: {unit} {state}")
            request = view.get("request")
            if isinstance(request, dict) and request.get("id") and \
                    str(request["id"]) not in self.state.handled_requests and \
                    not self.stale(request):
                requests.append({**request, "node": spec.node, "rank": spec.rank})
        return {"cause": cause, "paused": paused, "manual": manual,
                "unreachable": unreachable, "maintenance": maintenance,
                "transitional": transitional, "requests": requests, "summary": summary}

    def stale(self, request: dict[str, Any]) -> bool:
        """A request made before this supervisor started (before a deploy or a maintenance
        stop put a release in place) asked about engines that are gone."""
        made = request.get("time")
        return isinstance(made, (int, float)) and made < self.started_at

    def all_running(self, views: dict[str, Optional[dict[str, Any]]]) -> bool:
        for spec in self.config.ranks:
            view = views.get(spec.node)
            if view is None or view.get("release") != self.config.release:
                return False
            for unit in spec.units:
                if ((view.get("units") or {}).get(unit) or {}).get("state") != es.RUNNING:
                    return False
        return True

    # -- one tick ----------------------------------------------------------------------

    def tick(self) -> gangplan.Plan:
        now = self.clock()
        self.state.max_attempts = self.config.max_attempts
        views = self.io.rank_states()
        hold = healthstore.read_hold(self.config.root, now)
        self.state.held = hold.to_dict() if hold else None
        self.state.error = None if self.token else self.state.error
        assessment = self.assess(views)
        self.state.ranks = assessment["summary"]
        if hold is not None:
            # Observe only: the probe and the ranks' states stay truthful for `status`.
            self.run_probe(now)
            self.state.paused = f"held by {hold.by} until {_iso(hold.until)}: {hold.reason}"
            plan = self.make_plan("hold")
        elif assessment["maintenance"] is not None:
            plan = maintenance_phase.maintain(self, now, *assessment["maintenance"])
        elif self.state.phase == MAINTENANCE:
            plan = maintenance_phase.returned(self, now)
        else:
            plan = self.decide(now, views, assessment)
        self.publish(plan)
        self.save()
        return plan

    def decide(self, now: float, views: dict[str, Optional[dict[str, Any]]],
               assessment: dict[str, Any]) -> gangplan.Plan:
        phase = self.state.phase
        self.state.paused = None
        self.state.waiting_for = []
        if phase in (SERVING, GAVE_UP):
            return self.watch(now, views, assessment)
        if phase == STOPPING:
            return self.stopping(now, views, assessment)
        if phase == NPUS:
            return self.npus(now, views, assessment)
        if phase == BACKOFF:
            if now >= (self.state.not_before or 0):
                self.enter(STARTING, now)
                self.state.step_index, self.state.step_since = 0, now
                return self.make_plan("start", 0)
            return self.make_plan("stop")
        if phase == STARTING:
            return self.starting(now, views, assessment)
        if phase == WARMING:
            return self.warming(now, views, assessment)
        self.enter(SERVING, now)
        return self.make_plan("run")

    def enter(self, phase: str, now: float) -> None:
        self.state.phase, self.state.phase_since = phase, now

    def watch(self, now: float, views: dict[str, Optional[dict[str, Any]]],
              assessment: dict[str, Any]) -> gangplan.Plan:
        result = self.run_probe(now)
        gave_up = self.state.phase == GAVE_UP
        # after a give-up every unit is stopped by the supervisor itself: not a hands-off
        if assessment["manual"] and not self.state.manual and not gave_up:
            self.state.manual = assessment["manual"]
            self.event("hands-off", reason=f"{assessment['manual']}: no recovery until the "
                       "group is seen serving again")
        if not gave_up and assessment["requests"] and not assessment["paused"] \
                and not self.state.manual:
            # the HBM watchdog asks for a restart of a group that still serves
            request = assessment["requests"][0]
            self.state.handled_requests = (self.state.handled_requests
                                           + [str(request["id"])])[-HANDLED_REQUESTS_KEPT:]
            asker = "fault policy" if request.get("source") == "fault-policy" else "HBM watchdog"
            return self.begin(now, f"rank {request['rank']} ({request['node']}): {asker}: "
                              f"{request.get('reason', 'restart requested')}", request["node"],
                              request["rank"])
        if result.get("ok") and self.all_running(views):
            self.state.failing_since = None
            self.state.manual = None
            if gave_up:
                self.event("serving-again", reason="the group serves again (redeployed or "
                           "started by hand)")
                self.state.gave_up_reason, self.state.attempt = None, 0
                self.enter(SERVING, now)
            if self.state.healthy_since is None:
                self.state.healthy_since = now
            if self.state.attempt and now - self.state.healthy_since >= self.config.stable_s:
                self.state.attempt = 0
            return self.make_plan("run")
        if gave_up:
            self.state.paused = f"gave up: {self.state.gave_up_reason}"
            return self.make_plan("stop")
        self.state.healthy_since = None if not result.get("ok") else self.state.healthy_since
        if self.state.manual:
            self.state.paused = (f"hands off since {self.state.manual}; until the group "
                                 "serves again (start it in rank order, or `ascendctl deploy`)")
            return self.make_plan("run")
        if assessment["paused"]:
            self.state.paused = assessment["paused"]
            return self.make_plan("run")
        cause = assessment["cause"]
        if result.get("ok") or result.get("busy"):
            self.state.failing_since = None     # a queue, not a hang: the counter advances
        else:
            self.state.failing_since = self.state.failing_since or now
        if cause is None and assessment["unreachable"] and self.state.failing_since:
            node = assessment["unreachable"][0]
            cause = (f"rank {self.config.rank_of(node)} ({node}) unreachable and the probe "
                     f"fails: {result.get('error')}", node, self.config.rank_of(node))
        if cause is None and self.state.failing_since is not None and \
                now - self.state.failing_since >= self.config.probe_failure_s:
            cause = (f"the serving probe failed for {now - self.state.failing_since:.0f} s: "
                     f"{result.get('error')}", self.config.head_node or None,
                     0 if self.config.head_node else None)
        if cause is None:
            return self.make_plan("run")
        return self.begin(now, *cause)

    def begin(self, now: float, cause: str, node: Optional[str], rank: Optional[int]
              ) -> gangplan.Plan:
        """A new reason to restart the group: a first attempt, or (when the group failed
        again before it was stable) the next attempt."""
        if self.state.attempt:
            self.state.cause, self.state.cause_node, self.state.cause_rank = cause, node, rank
            self.state.detected_at = self.state.failing_since or now
            return self.attempt_failed(now, f"failed again before it was stable for "
                                       f"{self.config.stable_s:.0f} s: {cause}")
        self.state.attempt = 1
        self.state.cause, self.state.cause_node, self.state.cause_rank = cause, node, rank
        self.state.detected_at = self.state.failing_since or now
        self.state.generation += 1
        self.state.not_before = None
        self.state.last_error = None
        self.enter(STOPPING, now)
        self.event("started", max_attempts=self.config.max_attempts,
                   detected_at=round(self.state.detected_at, 3))
        return self.make_plan("stop")

    def attempt_failed(self, now: float, reason: str) -> gangplan.Plan:
        self.state.last_error = reason
        self.event("attempt-failed", reason=reason)
        self.state.generation += 1
        if self.state.attempt >= self.config.max_attempts:
            self.state.gave_up_reason = (f"{self.state.attempt} attempt(s) failed; last: "
                                         f"{reason}")
            self.enter(GAVE_UP, now)
            self.event("gave-up", reason=self.state.gave_up_reason)
            return self.make_plan("stop")
        delay = min(self.config.backoff_max_s,
                    self.config.backoff_s * 2 ** (self.state.attempt - 1))
        self.state.attempt += 1
        self.state.not_before = now + delay
        self.enter(STOPPING, now)
        self.event("retry", backoff_s=delay)
        return self.make_plan("stop")

    def stopping(self, now: float, views: dict[str, Optional[dict[str, Any]]],
                 assessment: dict[str, Any]) -> gangplan.Plan:
        lagging = []
        for spec in self.config.ranks:
            view = views.get(spec.node)
            if view is None:
                continue
            if view.get("stopped_for") != self.state.generation:
                lagging.append(spec.node)
        self.state.waiting_for = [f"{n} (unreachable)" for n in assessment["unreachable"]] \
            + lagging
        if assessment["unreachable"]:
            self.state.phase_since = now   # waiting for a node to come back is no failure
            return self.make_plan("stop")
        if lagging:
            if now - self.state.phase_since > self.config.stop_timeout_s:
                return self.attempt_failed(now, f"{', '.join(lagging)} did not stop within "
                                           f"{self.config.stop_timeout_s:.0f} s")
            return self.make_plan("stop")
        self.enter(NPUS, now)
        return self.npus(now, views, assessment)

    def npus(self, now: float, views: dict[str, Optional[dict[str, Any]]],
             assessment: dict[str, Any]) -> gangplan.Plan:
        if assessment["unreachable"]:
            self.state.waiting_for = [f"{n} (unreachable)" for n in assessment["unreachable"]]
            self.state.phase_since = now
            return self.make_plan("stop")
        held = []
        for spec in self.config.ranks:
            npu = (views.get(spec.node) or {}).get("npu") or {}
            if not npu.get("ok"):
                held.append(f"{spec.node}: npu-smi: {npu.get('error') or 'no answer'}")
            for proc in npu.get("processes") or []:
                held.append(f"{spec.node}: NPU {proc.get('npu')} held by PID {proc.get('pid')} "
                            f"({proc.get('name') or '?'}, {proc.get('mem_mb')} MB"
                            f"{', not the engine' if not proc.get('engine') else ''})")
        self.state.waiting_for = held
        if held:
            if now - self.state.phase_since > self.config.npu_free_timeout_s:
                return self.attempt_failed(now, "NPUs not free after "
                                           f"{self.config.npu_free_timeout_s:.0f} s: "
                                           + "; ".join(held[:4]))
            return self.make_plan("stop")
        if self.state.not_before is not None and now < self.state.not_before:
            self.enter(BACKOFF, now)
            return self.make_plan("stop")
        self.enter(STARTING, now)
        self.state.step_index, self.state.step_since = 0, now
        return self.make_plan("start", 0)

    def _start_failure(self, views: dict[str, Optional[dict[str, Any]]],
                       assessment: dict[str, Any], upto: int) -> Optional[str]:
        if assessment["unreachable"]:
            return f"{', '.join(assessment['unreachable'])} became unreachable"
        for index, (node, unit) in enumerate(self.config.steps):
            if index > upto:
                break
            info = ((views.get(node) or {}).get("units") or {}).get(unit) or {}
            if info.get("state") in (es.CRASHED, es.STOPPED, es.NOT_STARTED) and \
                    (index < upto or info.get("state") == es.CRASHED):
                line = f": {info['journal']}" if info.get("journal") else ""
                return (f"rank {self.config.rank_of(node)} ({node}): {unit} "
                        f"{info.get('state')} ({info.get('exit') or info.get('result') or '-'})"
                        f"{line}")
        return None

    def starting(self, now: float, views: dict[str, Optional[dict[str, Any]]],
                 assessment: dict[str, Any]) -> gangplan.Plan:
        index = self.state.step_index
        failure = self._start_failure(views, assessment, index)
        if failure:
            return self.attempt_failed(now, f"start: {failure}")
        node, unit = self.config.steps[index]
        view = views.get(node) or {}
        info = (view.get("units") or {}).get(unit) or {}
        started = info.get("state") == es.RUNNING and gangrules.rank_is_up(
            info.get("active_for_s") or 0,
            lambda: node == self.config.head_node and view.get("listening") is True,
            settle_s=self.config.settle_s)
        if started:
            if index + 1 >= len(self.config.steps):
                self.enter(WARMING, now)
                self.last_probe_at = float("-inf")
                return self.make_plan("run")
            self.state.step_index, self.state.step_since = index + 1, now
            return self.make_plan("start", index + 1)
        if now - self.state.step_since > self.config.rank_start_wait_s:
            return self.attempt_failed(now, f"start: rank {self.config.rank_of(node)} ({node}) "
                                       f"{unit} not up within {self.config.rank_start_wait_s:.0f}"
                                       f" s ({info.get('state') or 'no state'})")
        return self.make_plan("start", index)

    def warming(self, now: float, views: dict[str, Optional[dict[str, Any]]],
                assessment: dict[str, Any]) -> gangplan.Plan:
        failure = self._start_failure(views, assessment, len(self.config.steps))
        if failure:
            return self.attempt_failed(now, f"warm-up: {failure}")
        result = self.run_probe(now)
        if result.get("ok"):
            seconds = now - (self.state.detected_at or self.state.phase_since)
            self.state.recoveries_total += 1
            self.state.last_recovery = {"cause": self.state.cause, "seconds": round(seconds, 1),
                                        "at": now, "attempt": self.state.attempt,
                                        "generation": self.state.generation}
            self.event("recovered", seconds=round(seconds, 1))
            self.state.healthy_since = now
            self.state.failing_since = None
            self.enter(SERVING, now)
            return self.make_plan("run")
        if now - self.state.phase_since > self.config.startup_timeout_s:
            return self.attempt_failed(now, f"not serving within "
                                       f"{self.config.startup_timeout_s:.0f} s: "
                                       f"{result.get('error')}")
        return self.make_plan("run")


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def log(message: str) -> None:
    print(f"ascendctl-supervisor: {message}", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        config = SupervisorConfig.load(args[0])
    except (OSError, ValueError, TypeError, KeyError) as err:
        log(f"bad config: {err}")
        return 2
    supervisor = Supervisor(config, Io(config))
    stopping = {"now": False}

    def on_term(signum: int, _frame: Any) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log(f"supervising {config.cluster} release {config.release}: "
        f"{len(config.ranks)} rank(s), phase {supervisor.state.phase}, "
        f"generation {supervisor.state.generation}")
    try:
        while not stopping["now"]:
            started = time.monotonic()
            try:
                supervisor.tick()
            except Exception as err:  # noqa: BLE001 - keep supervising
                log(f"tick failed: {type(err).__name__}: {err}")
            delay = config.tick_s - (time.monotonic() - started)
            end = time.monotonic() + max(0.0, delay)
            while not stopping["now"] and time.monotonic() < end:
                time.sleep(min(0.2, end - time.monotonic()) if end > time.monotonic() else 0)
    finally:
        # No plan without a supervisor: the agents stop acting at once.
        supervisor.withdraw_plan()
        log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
