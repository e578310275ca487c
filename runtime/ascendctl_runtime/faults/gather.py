"""One reading of the node: the driver tools' outputs, the logs' new lines and the engine's
progress, parsed into a `Reading`.

- `npu-smi info` once: each NPU's health and temperature (the main table's Temp(C)
  column; `-t temp` only when the table has none) and the process table (HBM holders);
- `npu-smi info -t ecc -i N -c 0` for each NPU; `-t health` only for an NPU whose health
  in the main table is not OK, for its codes;
- `hccn_tool -i P -link -g` and `-link_stat -g` for each port;
- the new lines of the log files (logtail.py) and the engine's /metrics (progress.py).

A command that fails or prints what its parser refuses is a gather error, kept in the
reading and shown; nothing here raises out of `Gatherer.read`. The raw outputs stay in the
reading for the evidence of an event (evidence.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from ascendctl.facts.npu_smi import NpuChip, NpuSmiInfo, parse_npu_smi_info
from ascendctl_runtime.contract import FaultsConfig
from ascendctl_runtime.faults.link import LinkStat, LinkState, parse_link, parse_link_stat
from ascendctl_runtime.faults.logcodes import LogCode, scan_log
from ascendctl_runtime.faults.logtail import LogTail
from ascendctl_runtime.faults.npu_ecc import EccReading, parse_ecc
from ascendctl_runtime.faults.npu_health import STATUSES, HealthReading, parse_health
from ascendctl_runtime.faults.npu_temp import TemperatureReading, parse_temperature
from ascendctl_runtime.faults.progress import ProgressAnswer, read_progress
from ascendctl_runtime.faults.signals import HbmHolder
from ascendctl_runtime.faults.text import MAX_TEXT_CHARS, FaultParseError
from ascendctl_runtime.npu import HCCN_TOOL, NPU_SMI

Runner = Callable[[List[str], float], Tuple[int, str]]
T = TypeVar("T")
MAX_ERROR_CHARS = 300
METRICS_TIMEOUT_S = 3.0
MAIN = "npu-smi info"


@dataclass(frozen=True)
class LogHit:
    code: LogCode
    path: str
    line: str            # the line that carries the code (at most 500 characters)


@dataclass
class Reading:
    at: float
    health: Dict[int, HealthReading] = field(default_factory=dict)
    temperature: Dict[int, TemperatureReading] = field(default_factory=dict)
    ecc: Dict[int, EccReading] = field(default_factory=dict)
    holders: Dict[int, List[HbmHolder]] = field(default_factory=dict)
    links: Dict[int, LinkState] = field(default_factory=dict)
    link_stats: Dict[int, LinkStat] = field(default_factory=dict)
    log_hits: List[LogHit] = field(default_factory=list)
    progress: Optional[ProgressAnswer] = None
    outputs: Dict[str, str] = field(default_factory=dict)     # command -> its output
    errors: List[str] = field(default_factory=list)


def npu_command(kind: str, npu: int) -> List[str]:
    return [NPU_SMI, "info", "-t", kind, "-i", str(npu), "-c", "0"]


def port_command(port: int, what: str) -> List[str]:
    return [HCCN_TOOL, "-i", str(port), what, "-g"]


class Gatherer:
    def __init__(self, config: FaultsConfig, run: Runner) -> None:
        self.config = config
        self.run = run
        self.logs = LogTail(config.log_globs)

    def read(self, at: float) -> Reading:
        reading = Reading(at)
        info = self._command(reading, [NPU_SMI, "info"], _parse_main)
        chips = {c.npu_id: c for c in info.chips if c.chip_id == 0} if info is not None else {}
        for npu in self.config.npus:
            self._npu(reading, npu, chips.get(npu), info)
        for port in self.config.ports:
            link = self._command(reading, port_command(port, "-link"), parse_link)
            if link is not None:
                reading.links[port] = link
            stat = self._command(reading, port_command(port, "-link_stat"), parse_link_stat)
            if stat is not None:
                reading.link_stats[port] = stat
        self._logs(reading)
        if self.config.engine_metrics_url:
            reading.progress = read_progress(self.config.engine_metrics_url,
                                             min(METRICS_TIMEOUT_S, self.config.command_timeout_s))
            if reading.progress.evidence:
                reading.outputs["metrics"] = reading.progress.evidence
        return reading

    def _npu(self, reading: Reading, npu: int, chip: Optional[NpuChip], info: Optional[NpuSmiInfo]) -> None:
        if info is not None and chip is None:
            reading.errors.append(f"{MAIN}: no NPU {npu} chip 0 in the table")
        if chip is not None:
            if chip.health == "OK":
                reading.health[npu] = HealthReading("OK", (), ())
            else:
                health = self._command(reading, npu_command("health", npu), parse_health)
                if health is None and chip.health in STATUSES:
                    health = HealthReading(chip.health, (), ())     # the codes unknown
                if health is not None:
                    reading.health[npu] = health
            reading.holders[npu] = [HbmHolder(p.pid, p.memory_mb) for p in info.processes
                                    if p.npu_id == npu and p.chip_id in (None, 0)] if info else []
        if chip is not None and chip.temp_c is not None:
            reading.temperature[npu] = TemperatureReading(chip.temp_c)
        elif chip is not None:          # a table without Temp(C)
            temperature = self._command(reading, npu_command("temp", npu), parse_temperature)
            if temperature is not None:
                reading.temperature[npu] = temperature
        ecc = self._command(reading, npu_command("ecc", npu), parse_ecc)
        if ecc is not None:
            reading.ecc[npu] = ecc

    def _logs(self, reading: Reading) -> None:
        chunks, errors = self.logs.read()
        reading.errors.extend(e[:MAX_ERROR_CHARS] for e in errors)
        for chunk in chunks:
            try:
                codes = scan_log(chunk.text)
            except FaultParseError as err:
                reading.errors.append(f"{chunk.path}: {err}"[:MAX_ERROR_CHARS])
                continue
            if codes:
                lines = chunk.text.splitlines()
                reading.log_hits.extend(LogHit(code, chunk.path, lines[code.line - 1][:500]) for code in codes)

    def _command(self, reading: Reading, argv: List[str], parse: Callable[[str], T]) -> Optional[T]:
        name = " ".join(argv)
        try:
            code, text = self.run(argv, self.config.command_timeout_s)
        except (OSError, ValueError) as err:
            reading.errors.append(f"{name}: {type(err).__name__}: {err}"[:MAX_ERROR_CHARS])
            return None
        reading.outputs[name] = text[:MAX_TEXT_CHARS]
        if code != 0:
            first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
            reading.errors.append(f"{name}: exit {code}: {first}"[:MAX_ERROR_CHARS])
            return None
        try:
            return parse(text)
        except FaultParseError as err:
            reading.errors.append(f"{name}: {err}"[:MAX_ERROR_CHARS])
            return None


def _parse_main(text: str) -> NpuSmiInfo:
    if len(text) > MAX_TEXT_CHARS:
        raise FaultParseError(MAIN, f"output of {len(text)} characters, more than {MAX_TEXT_CHARS}")
    info = parse_npu_smi_info(text)
    if not info.ok:
        raise FaultParseError(MAIN, str(info.error)[:200])
    return info
