"""The raw lines of a reading that showed a fault: for an event, the exact line(s) of the
tool's output (or of the log, or of the engine's metrics), at most MAX_EVIDENCE_CHARS."""

from __future__ import annotations

from typing import AbstractSet, Iterable, List

from ascendctl_runtime.faults.gather import MAIN, Reading, npu_command, port_command

MAX_EVIDENCE_CHARS = 500
_HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN", "NA")


def _bounded(lines: Iterable[str]) -> str:
    return "\n".join(line.rstrip() for line in lines)[:MAX_EVIDENCE_CHARS]


def _matching(text: str, *needles: str) -> List[str]:
    """The lines of TEXT that contain one of NEEDLES."""
    return [line for line in text.splitlines() if any(needle in line for needle in needles)]


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table_rows(reading: Reading, npu: int, processes: bool, own: AbstractSet[int] = frozenset()) -> List[str]:
    """The main table's first row of NPU's block, or its process rows but the OWN pids'."""
    rows = []
    for line in reading.outputs.get(MAIN, "").splitlines():
        cells = _cells(line)
        if not line.lstrip().startswith("|") or len(cells) < 3 or cells[0].split()[:1] != [str(npu)]:
            continue
        second = cells[1].split()[:1]
        if processes and second and second[0].isdigit() and int(second[0]) not in own or \
                not processes and second and second[0] in _HEALTH_VALUES and len(cells[0].split()) > 1:
            rows.append(line)
    return rows


def _npu(key: str, npu: int, reading: Reading, own: AbstractSet[int]) -> List[str]:
    if key.startswith("ecc."):
        label = "HBM Double Bit Error Count" if key == "ecc.multi_bit" else "HBM Single Bit Error Count"
        return _matching(reading.outputs.get(" ".join(npu_command("ecc", npu)), ""), label)
    if key == "hbm.foreign":
        return _table_rows(reading, npu, True, own)
    if key == "temp.high":
        lines = _matching(reading.outputs.get(" ".join(npu_command("temp", npu)), ""), "Temperature")
        return lines or _table_rows(reading, npu, processes=False)
    lines = _matching(reading.outputs.get(" ".join(npu_command("health", npu)), ""), "Health", "Error Code")
    return lines or _table_rows(reading, npu, processes=False)


def evidence(key: str, subject: str, reading: Reading, own_pids: AbstractSet[int] = frozenset()) -> str:
    """The lines of READING that show KEY on SUBJECT (own_pids: the engine's, for hbm.foreign)."""
    if subject.startswith("npu") and subject[3:].isdigit():
        return _bounded(_npu(key, int(subject[3:]), reading, own_pids))
    if subject.startswith("port") and subject[4:].isdigit():
        port = int(subject[4:])
        if key == "link.down":
            return _bounded(_matching(reading.outputs.get(" ".join(port_command(port, "-link")), ""),
                                      "link status"))
        return _bounded(_matching(reading.outputs.get(" ".join(port_command(port, "-link_stat")), ""),
                                  "link up count", "link down count"))
    if key == "engine.stall":
        progress = reading.progress
        return _bounded([reading.outputs.get("metrics") or (progress.error if progress else "")])
    return _bounded(f"{hit.path}: {hit.line}" for hit in reading.log_hits if hit.code.code == key)
