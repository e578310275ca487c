"""What the node does with a fault event (faults/monitor.py): the policy's action, taken
here and nowhere else.

    alert     nothing more: the event is in fault-events.json, the exporter counts it
              (ascendctl_fault_events_total) and Prometheus alerts on it
    restart   a gang restart request for the group's supervisor (as the HBM watchdog asks)
    drain     the node enters maintenance (maintenance.py): the gateway takes its group out,
    isolate   the supervisor drains and stops it; it stays out until `ascendctl node undrain`
"""

from __future__ import annotations

import json
import threading
import time
import uuid

from ascendctl_runtime import healthstore, layout, maintenance
from ascendctl_runtime.faults.monitor import FaultEvent, FaultMonitor
from ascendctl_runtime.nodeutil import repeat, say, write_atomic

SOURCE = "fault-policy"


def reason_of(event: FaultEvent) -> str:
    what = f"{event.key} on {event.subject}"
    detail = event.detail if event.detail.startswith(what) else f"{what}: {event.detail}"
    return f"{detail} (policy: {event.policy_action}, {event.source})"


def act(root: str, node: str, event: FaultEvent) -> str:
    """Take EVENT's action on this node; what was done, in words."""
    if event.action == "restart":
        request = {"id": uuid.uuid4().hex, "source": SOURCE, "reason": reason_of(event),
                   "time": event.time}
        write_atomic(healthstore.health_path(root, layout.RESTART_REQUEST),
                     (json.dumps(request, sort_keys=True) + "\n").encode(), 0o644)
        return f"asked the supervisor for a gang restart (request {request['id']})"
    if event.action in ("drain", "isolate"):
        state = maintenance.DRAINED if event.action == "drain" else maintenance.ISOLATED
        record, changed = maintenance.enter(root, node, maintenance.Maintenance(
            state=state, since=round(time.time(), 3), by="policy",  # type: ignore[arg-type]
            reason=reason_of(event)[:maintenance.TEXT_MAX], key=event.key,
            evidence=event.evidence[:maintenance.TEXT_MAX]))
        return f"node {state}" if changed else f"node already {record.state}"
    return "alerted" if event.action == "alert" else "nothing"


def run_forever(monitor: FaultMonitor, root: str, node: str, cluster: str,
                stop: threading.Event) -> None:
    """Read the node every interval and act on what the policy says (in the exporter's
    process, next to the agent)."""
    log(f"watching {node} for hardware faults every {monitor.config.interval_s:g} s")

    def reading() -> None:
        for event in monitor.step():
            done = act(root, node, event)
            log(f"{event.action} {event.key} on {event.subject}: {event.detail} -> {done}")
            healthstore.append_event(root, {
                "event": "fault", "cluster": cluster, "node": node, "t": round(event.time, 3),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event.time)),
                "stage": event.action, "key": event.key, "subject": event.subject,
                "reason": f"{reason_of(event)}: {done}", "evidence": event.evidence})
        healthstore.write_json(healthstore.health_path(root, layout.FAULT_VIEW), monitor.view())

    repeat(stop, monitor.config.interval_s, reading, "faults")


def log(message: str) -> None:
    say("faults", message)
