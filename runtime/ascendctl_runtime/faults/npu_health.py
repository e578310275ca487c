"""`npu-smi info -t health -i N [-c C]`: the chip's health and its alarm codes.

Format (npucli npu_info_print.c, print_diagnosis_info; captured in
tests/fixtures/npu-smi_info_t_health.txt): `Health Status : OK|Warning|Alarm|Critical|UNKNOWN`
(`Health` on the 950 and in the chip-health path, `NA` for an MCU in a container), then
`Error Code : NA` or the codes as ` %04X` each, then `Error Information : ...` whose
further entries are lines with a blank key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ascendctl_runtime.faults.text import FaultParseError, bounded_lines, key_value_lines

WHAT = "npu-smi info -t health"
STATUSES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN", "NA")
_CODE = re.compile(r"[0-9A-Fa-f]{4,8}")
# npu-smi prints these instead of its output (tests/fixtures/npu-smi_error_outputs.txt)
_TOOL_ERRORS = ("Invalid card id", "Error parameter of", "Usage: npu-smi",
                "does not support querying", "dcmi module initialize failed")


@dataclass(frozen=True)
class HealthReading:
    status: str                       # one of STATUSES
    codes: Tuple[str, ...]            # upper-case hex as printed, e.g. ('A4025021', '8C03A000')
    information: Tuple[str, ...]      # one entry per code when the driver describes it

    @property
    def healthy(self) -> bool:
        return self.status == "OK" and not self.codes


def tool_error(lines: List[str]) -> Optional[str]:
    for line in lines:
        if any(marker in line for marker in _TOOL_ERRORS):
            return line.strip()
    return None


def npu_smi_lines(text: str, what: str) -> List[str]:
    """The lines of an npu-smi output (bounded_lines), refused when npu-smi printed one of
    its errors instead."""
    lines = bounded_lines(text, what)
    error = tool_error(lines)
    if error:
        raise FaultParseError(what, f"npu-smi failed: {error}")
    return lines


def parse_health(text: str) -> HealthReading:
    lines = npu_smi_lines(text, WHAT)
    status: Optional[str] = None
    codes: Tuple[str, ...] = ()
    information: List[str] = []
    last_key = ""
    for number, key, value in key_value_lines(lines):
        if not key and not value:
            continue
        if not key:
            if last_key == "Error Information" and value and value != "NA":
                information.append(value)
            continue
        last_key = key
        if key in ("Health Status", "Health"):
            if status is not None:
                raise FaultParseError(WHAT, "a second health status: one chip's output expected", number)
            if value not in STATUSES:
                raise FaultParseError(WHAT, f"health status {value[:40]!r} is none of {', '.join(STATUSES)}", number)
            status = value
        elif key == "Error Code":
            codes = _codes(value, number)
        elif key == "Error Information" and value and value != "NA":
            information.append(value)
    if status is None:
        raise FaultParseError(WHAT, "no 'Health Status' line")
    return HealthReading(status, codes, tuple(information))


def _codes(value: str, number: int) -> Tuple[str, ...]:
    if value in ("", "NA"):
        return ()
    tokens = value.split()
    for token in tokens:
        if not _CODE.fullmatch(token):
            raise FaultParseError(WHAT, f"error code {token[:40]!r} is not 4 to 8 hex digits", number)
    return tuple(token.upper() for token in tokens)
