"""The chip temperature, from `npu-smi info -t temp -i N -c C` or `-t common -i N`.

Formats: `-t temp` prints `\\t%-30s : %d` as `NPU Temperature (C)` on a server and
`Temperature (C)` on a card (npucli npu_info_print.c print_chip_temp_info); `-t common`
prints `Temperature(C)` in the chip's section, then an MCU section (`Chip Name : mcu`) with
the board MCU's own temperature (tests/fixtures/npu-smi_info_t_common_910B.txt), which is
not the chip's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ascendctl_runtime.faults.npu_health import npu_smi_lines
from ascendctl_runtime.faults.text import FaultParseError, key_value_lines

WHAT = "npu-smi temperature"
_KEYS = ("NPU Temperature (C)", "Temperature (C)", "Temperature(C)")


@dataclass(frozen=True)
class TemperatureReading:
    chip_c: int


def _sections(lines: List[str]) -> List[List[Tuple[int, str, str]]]:
    sections: List[List[Tuple[int, str, str]]] = [[]]
    for entry in key_value_lines(lines):
        if not entry[1] and not entry[2]:
            if sections[-1]:
                sections.append([])
            continue
        sections[-1].append(entry)
    return [s for s in sections if s]


def parse_temperature(text: str) -> TemperatureReading:
    lines = npu_smi_lines(text, WHAT)
    found: Optional[TemperatureReading] = None
    for section in _sections(lines):
        if any(key == "Chip Name" and value.lower() == "mcu" for _, key, value in section):
            continue
        for number, key, value in section:
            if key not in _KEYS:
                continue
            digits = value[1:] if value.startswith("-") else value
            if not digits.isdigit() or not digits.isascii() or len(digits) > 4:
                raise FaultParseError(WHAT, f"{key}: {value[:40]!r} is not a temperature", number)
            if found is not None:
                raise FaultParseError(WHAT, "a second chip temperature: one chip's output expected", number)
            found = TemperatureReading(int(value))
    if found is None:
        raise FaultParseError(WHAT, "no chip temperature line (" + ", ".join(_KEYS) + ")")
    return found
