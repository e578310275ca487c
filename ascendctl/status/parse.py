"""One node's raw status answer (ascendctl_runtime.status_node) into a NodeStatus. Pure."""

from __future__ import annotations

from typing import Any, Optional

from ascendctl.facts.hccn import parse_link
from ascendctl.facts.npu_smi import parse_npu_smi_info
from ascendctl.inventory import Host
from ascendctl.status.model import (
    ChipStatus, EngineUnit, NodeStatus, NpuHolder, SupervisorStatus,
)

RECOVERY_FRESH_S = 60.0   # a supervisor state older than this is a supervisor that stopped


def node_status(host: Host, raw: dict[str, Any], *, expect_npus: int,
                engine_units: list[str]) -> NodeStatus:
    status = NodeStatus(name=host.name, rank=host.rank, reachable=True,
                        release=raw.get("current"))
    now = raw.get("time")
    starts = raw.get("starts") or {}
    for unit, state in (raw.get("states") or {}).items():
        if state.get("state") == "missing":
            continue
        status.units[unit] = f"{state.get('active')}/{state.get('sub')}"
        if unit in engine_units:
            since = state.get("since")
            status.restarts[unit] = int(starts.get(unit, 0))
            status.engine.append(EngineUnit(
                unit=unit, state=state.get("state") or "unknown", since=since,
                ago_s=None if since is None or now is None else round(max(0.0, now - since), 1),
                exit=state.get("exit"), journal=state.get("journal"),
                restarts=int(starts.get(unit, 0)), main_pid=int(state.get("main_pid") or 0),
                stopped_by_recovery=state.get("stopped_by_plan")))
    info = parse_npu_smi_info((raw.get("npu_smi") or {}).get("out", ""))
    if info.ok:
        status.chips = [ChipStatus(c.npu_id, c.chip_id, c.health, c.hbm_used_mb, c.hbm_total_mb,
                                   c.aicore_pct, c.temp_c) for c in info.chips]
        engine_pids = set(raw.get("engine_pids") or [])
        status.npu_processes = [NpuHolder(npu=p.npu_id, pid=p.pid, name=p.name,
                                          mem_mb=p.memory_mb, engine=p.pid in engine_pids)
                                for p in info.processes]
    else:
        status.npu_error = info.error
    for port, link in enumerate(raw.get("links") or []):
        status.links[port] = (parse_link(link.get("out", "")) or "?") if link.get("rc") == 0 \
            else "?"
    if "probe" in raw:
        status.probe = raw["probe"]
        status.engine_up = (raw.get("health") or {}).get("status") == 200
    status.metrics = raw.get("metrics") or {}
    status.router_metrics = raw.get("router_metrics") or {}
    status.maintenance = raw.get("maintenance") if isinstance(raw.get("maintenance"), dict) \
        else None
    status.fault_events = [e for e in raw.get("fault_events") or [] if isinstance(e, dict)]
    status.fault_signals = [o for o in raw.get("fault_signals") or [] if isinstance(o, dict)]
    limits = raw.get("fault_limits")
    status.fault_limits = limits if isinstance(limits, str) else None
    status.problems = node_problems(status, expect_npus)
    return status


def node_problems(status: NodeStatus, expect_npus: int) -> list[str]:
    """What is wrong on the node that does not by itself stop serving."""
    problems = []
    if status.npu_error:
        problems.append(f"npu-smi: {status.npu_error}")
    elif len({c.npu for c in status.chips}) < expect_npus:
        problems.append(f"{len({c.npu for c in status.chips})} of {expect_npus} NPUs visible")
    for chip in status.chips:
        if chip.health != "OK":
            problems.append(f"NPU {chip.npu} health {chip.health}")
    down = [str(p) for p, state in status.links.items() if state != "UP"]
    if down:
        problems.append(f"RoCE port(s) {', '.join(down)} not UP")
    for holder in status.foreign:
        problems.append(f"NPU {holder.npu} HBM held by PID {holder.pid} ({holder.name or '?'}, "
                        f"{holder.mem_mb} MB), not the engine")
    for signal in status.fault_signals:
        problems.append(f"fault signal {signal.get('key')} on {signal.get('subject')}: "
                        f"{signal.get('detail') or ''}"
                        + (f" ({status.fault_limits})" if status.fault_limits else ""))
    engine = {u.unit for u in status.engine}
    for unit, state in status.units.items():
        if unit not in engine and not state.startswith("active/"):
            problems.append(f"{unit} {state}")
    return problems


def supervisor_status(raw_head: Optional[dict[str, Any]], unit: str) -> Optional[SupervisorStatus]:
    """The supervisor as the head's answer shows it (None when there is none to show)."""
    if raw_head is None:
        return None
    unit_state = ((raw_head.get("states") or {}).get(unit) or {})
    state = raw_head.get("supervisor")
    age = raw_head.get("supervisor_age_s")
    active = unit_state.get("state") == "running"
    if unit_state.get("state") in (None, "missing") and state is None:
        return None
    fresh = state is not None and age is not None and age <= RECOVERY_FRESH_S
    since, now = unit_state.get("since"), raw_head.get("time")
    # just (re)started by a deploy: its first state is on its way
    starting = since is not None and now is not None and now - since <= RECOVERY_FRESH_S
    status = SupervisorStatus(running=active and (fresh or starting),
                              unit_state=unit_state.get("state"))
    if state is None:
        return status
    detected = state.get("detected_at")
    now = raw_head.get("time")
    status.phase = state.get("phase")
    status.generation = state.get("generation")
    status.attempt = int(state.get("attempt") or 0)
    status.max_attempts = state.get("max_attempts")
    status.cause, status.cause_node = state.get("cause"), state.get("cause_node")
    status.cause_rank = state.get("cause_rank")
    status.detected_ago_s = None if detected is None or now is None \
        else round(max(0.0, now - detected), 1)
    status.waiting_for = list(state.get("waiting_for") or [])
    status.paused = state.get("paused")
    # The hold file read now wins over the supervisor's last word: a deploy that has just
    # removed its hold must not be reported held until the next supervisor tick.
    status.held = raw_head["hold"] if "hold" in raw_head else state.get("held")
    status.gave_up_reason = state.get("gave_up_reason")
    status.last_error = state.get("last_error")
    status.recoveries_total = int(state.get("recoveries_total") or 0)
    status.last_recovery = state.get("last_recovery")
    status.error = state.get("error")
    return status
