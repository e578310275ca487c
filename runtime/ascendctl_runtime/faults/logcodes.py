"""Error codes in the engine's log, the CANN plog and the device event log.

Line shapes, verbatim in tests/fixtures/fault_log_lines.txt:
- CANN error codes (`E` + module letter + 4 digits) as torch_npu and HCCL print them:
  `Execution_Error_ROCE_CQE(EI0013): An error CQE occurred ...` (vllm-ascend#7384),
  `RuntimeError: EJ0002: [PID: 38079] ... The network port is down.` (vllm-ascend#1815),
  `[rank1]: EI0006: [PID: ...] ...`;
- device fault events as 8 hex digits, the codes of faultCode.json:
  `event_id=0x80E01809` (CANN 8.5 troubleshooting_0009, slog/dev-os-N/run/event/event_*.log)
  and `[fault_manager] event_id: [0x80E01809]` (CANN 8.0 troubleshooting_0008, device-os log).

Only the first MAX_LINE_CHARS of a line are scanned: a code sits at its start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Tuple

from ascendctl_runtime.faults.text import MAX_LINE_CHARS, FaultParseError

WHAT = "log"
MAX_LOG_CHARS = 8 * 1024 * 1024
# a code stands alone before ':' or inside '(...)'; nothing nested, so the scan is linear
_CANN = re.compile(r"(?<![A-Za-z0-9_])(E[A-Z][0-9]{4})(?=\)|:)")
_EVENT = re.compile(r"event_id(?:=|: ?\[)0x([0-9A-Fa-f]{8})\b")


@dataclass(frozen=True)
class LogCode:
    code: str            # EI0013, or the event id without 0x, upper case: 80E01809
    line: int            # 1-based, in the text scanned
    kind: str            # "cann" | "event"


def scan_log(text: str) -> Tuple[LogCode, ...]:
    if not isinstance(text, str):
        raise FaultParseError(WHAT, f"expected text, got {type(text).__name__}")
    if len(text) > MAX_LOG_CHARS:
        raise FaultParseError(WHAT, f"{len(text)} characters at once, more than {MAX_LOG_CHARS}")
    found: List[LogCode] = []
    for number, line in enumerate(text.splitlines(), 1):
        head = line[:MAX_LINE_CHARS]
        seen = set()
        for match in _CANN.finditer(head):
            if match.group(1) not in seen:
                seen.add(match.group(1))
                found.append(LogCode(match.group(1), number, "cann"))
        for match in _EVENT.finditer(head):
            code = match.group(1).upper()
            if code not in seen:
                seen.add(code)
                found.append(LogCode(code, number, "event"))
    return tuple(found)
