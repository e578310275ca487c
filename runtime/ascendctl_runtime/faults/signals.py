"""Readings at one time → observations, the evaluator's input.

An observation names its key (a fault code such as `80E01801` or `EI0013`, or one of
SIGNALS), its subject (`npu3`, `port3`, `node`) and its kind: a LEVEL holds at this reading
(a chip in Alarm, a port down), an EVENT happened `count` times since the previous reading
(counter increments, log lines). Counters need the previous reading; the first one is only a
baseline, and a counter that went down (cleared, driver reloaded) starts a new baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

from ascendctl_runtime.faults.link import LinkStat, LinkState
from ascendctl_runtime.faults.logcodes import LogCode
from ascendctl_runtime.faults.npu_ecc import EccReading
from ascendctl_runtime.faults.npu_health import HealthReading
from ascendctl_runtime.faults.npu_temp import TemperatureReading

LEVEL = "level"
EVENT = "event"

SIGNALS: Dict[str, str] = {
    "health.warning": "npu-smi health status Warning",
    "health.alarm": "npu-smi health status Alarm",
    "health.critical": "npu-smi health status Critical",
    "health.unknown": "npu-smi health status UNKNOWN",
    "ecc.single_bit": "HBM single-bit (corrected) ECC count went up",
    "ecc.multi_bit": "HBM multi-bit (uncorrectable) ECC count went up",
    "temp.high": "chip temperature at or above the policy's temp_high_c",
    "link.down": "RoCE port link status DOWN",
    "link.flap": "RoCE port link changes counter went up",
    "hbm.foreign": "HBM held by a process that is not the engine's",
    "engine.stall": "requests running and the generation counter flat",
}


@dataclass(frozen=True)
class Observation:
    key: str
    subject: str
    kind: str                 # LEVEL | EVENT
    count: int = 1            # EVENT: occurrences since the previous reading
    detail: str = ""


@dataclass(frozen=True)
class EngineProgress:
    """What the agent reads off the engine: requests running, and a counter that grows
    with every generated token (vllm:generation_tokens_total)."""
    running: int
    generation: int


@dataclass(frozen=True)
class HbmHolder:
    pid: int
    memory_mb: int


def from_health(npu: int, reading: HealthReading) -> List[Observation]:
    subject = f"npu{npu}"
    out = [Observation(code, subject, LEVEL, detail=f"health {reading.status}") for code in reading.codes]
    if reading.status not in ("OK", "NA"):
        out.append(Observation(f"health.{reading.status.lower()}", subject, LEVEL,
                               detail=" ".join(reading.codes) or "no code"))
    return out


def from_ecc(npu: int, previous: Optional[EccReading], current: EccReading) -> List[Observation]:
    if previous is None:
        return []
    subject = f"npu{npu}"
    out = []
    for key, before, now in (("ecc.single_bit", previous.single_bit, current.single_bit),
                             ("ecc.multi_bit", previous.multi_bit, current.multi_bit)):
        if now > before:
            out.append(Observation(key, subject, EVENT, now - before, f"{before} -> {now}"))
    return out


def from_temperature(npu: int, reading: TemperatureReading, high_c: int) -> List[Observation]:
    if reading.chip_c < high_c:
        return []
    return [Observation("temp.high", f"npu{npu}", LEVEL, detail=f"{reading.chip_c} C >= {high_c} C")]


def from_link(port: int, state: LinkState) -> List[Observation]:
    return [] if state.up else [Observation("link.down", f"port{port}", LEVEL, detail="link status DOWN")]


def from_link_stat(port: int, previous: Optional[LinkStat], current: LinkStat) -> List[Observation]:
    if previous is None or (previous.down_count is None) != (current.down_count is None):
        return []
    before, now = previous.changes, current.changes
    if now <= before:
        return []
    return [Observation("link.flap", f"port{port}", EVENT, now - before, f"link changes {before} -> {now}")]


def from_log(subject: str, codes: Iterable[LogCode]) -> List[Observation]:
    counts: Dict[str, int] = {}
    for found in codes:
        counts[found.code] = counts.get(found.code, 0) + 1
    return [Observation(code, subject, EVENT, n, "log") for code, n in sorted(counts.items())]


def from_progress(previous: Optional[EngineProgress], current: EngineProgress) -> List[Observation]:
    if previous is None or current.running <= 0 or current.generation != previous.generation:
        return []
    return [Observation("engine.stall", "node", LEVEL,
                        detail=f"{current.running} running, generation flat at {current.generation}")]


def from_hbm_holders(npu: int, holders: Sequence[HbmHolder], own_pids: Iterable[int]) -> List[Observation]:
    own = set(own_pids)
    foreign = sorted((h for h in holders if h.pid not in own and h.memory_mb > 0), key=lambda h: h.pid)
    if not foreign:
        return []
    detail = ", ".join(f"pid {h.pid} {h.memory_mb} MB" for h in foreign)
    return [Observation("hbm.foreign", f"npu{npu}", LEVEL, detail=detail)]
