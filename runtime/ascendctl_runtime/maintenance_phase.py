"""The supervisor's maintenance phase: a node of its group is drained or isolated
(maintenance.py), so the group leaves service without failing a request and stays out
until the node is returned.

    gateway   wait until the gateway watcher has the group out of the balancer (at most
              drain_timeout_s; at once without a gateway)
    drain     wait until the head runs and queues no request (two readings in a row, at
              most drain_timeout_s)
    stopped   a new plan generation stops every rank; no recovery, no start

When the node is returned (`ascendctl node undrain`), the group starts again through an
ordinary recovery (the ranks were stopped by a plan), and the gateway watcher puts it back
once its head answers /health.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ascendctl_runtime import gangplan

if TYPE_CHECKING:
    from ascendctl_runtime.supervisor import Supervisor

PHASE = "maintenance"
GATEWAY, DRAIN, STOPPED = "gateway", "drain", "stopped"


def _describe(node: str, record: dict[str, Any]) -> str:
    return (f"{node} {record.get('state', 'drained')} by {record.get('by', '?')}: "
            f"{record.get('reason', '')}")


def maintain(sup: "Supervisor", now: float, node: str, rank: int,
             record: dict[str, Any]) -> gangplan.Plan:
    state = sup.state
    why = _describe(node, record)
    if state.phase != PHASE:
        state.attempt = 0
        state.cause, state.cause_node, state.cause_rank = why, node, rank
        state.failing_since = state.healthy_since = None
        state.detected_at = now
        sup.enter(PHASE, now)
        state.maintenance_step, state.step_since = GATEWAY, now
        sup.event("maintenance", reason=why)
    state.paused = f"{why}; no recovery until `ascendctl node undrain {node}`"
    timeout = sup.config.drain_timeout_s
    if state.maintenance_step == GATEWAY:
        out = sup.io.gateway_out()
        waited = now - state.step_since
        if out is None or out or waited >= timeout:
            note = ("no gateway answers" if out is None else "out of the balancer" if out
                    else f"the gateway did not take it out within {timeout:.0f} s")
            sup.event("maintenance-out", reason=f"{note} after {waited:.1f} s")
            state.maintenance_step, state.step_since = DRAIN, now
            state.waiting_for = []
        else:
            state.waiting_for = ["the gateway to take the group out of the balancer"]
    if state.maintenance_step == DRAIN:
        in_flight = sup.io.in_flight()
        waited = now - state.step_since
        state.waiting_for = [f"{in_flight:.0f} request(s) in flight to finish"
                             if in_flight else "the head to stay idle"]
        state.quiet_readings = (state.quiet_readings + 1) if not in_flight else 0
        quiet = state.quiet_readings
        if quiet >= 2 or waited >= timeout:
            reason = (f"drained in {waited:.1f} s" if quiet >= 2 else
                      f"drain timed out after {timeout:.0f} s with {in_flight:.0f} in flight")
            state.generation += 1
            state.maintenance_step, state.quiet_readings = STOPPED, 0
            state.waiting_for = []
            sup.event("maintenance-stop", reason=f"{reason}: stopping every rank")
    if state.maintenance_step == STOPPED:
        return sup.make_plan("stop")
    return sup.make_plan("run")


def returned(sup: "Supervisor", now: float) -> gangplan.Plan:
    """The node is back: start the group as a recovery (its ranks were stopped by a plan)."""
    state = sup.state
    node = state.cause_node
    sup.event("maintenance-end", reason=f"{node} returned to serving")
    state.maintenance_step, state.quiet_readings = None, 0
    state.paused = None
    state.waiting_for = []
    sup.enter("serving", now)
    state.attempt = 0
    return sup.begin(now, f"{node} returned from maintenance: starting the group", node,
                     state.cause_rank)
