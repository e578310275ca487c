"""A RoCE port's state and its link history, from hccn_tool (the device's physical id).

- `hccn_tool -i N -link -g` prints `link status: UP` or `link status: DOWN`
  (tests/fixtures/hccn_tool_status.txt).
- `hccn_tool -i N -link_stat -g` prints `[devid N]current time        : <asctime>`,
  `[devid N]link up count       : n`, on newer drivers `[devid N]link down count     : n`,
  `[devid N]link change records :` (or `: NA`), then one record per change, newest first:
  `[devid N]    <asctime>    LINK UP|LINK DOWN` (hccn_tool/tool.c in verylucky01/driver;
  captured in tests/fixtures/hccn_tool_link_stat.txt, where MindCluster's docs print
  `[device N]`). The driver keeps a bounded number of records (LINK_STAT_MAX_IDX), so the
  counters, not the records, say how often the link changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ascendctl_runtime.faults.text import FaultParseError, bounded_lines, parse_count

LINK_WHAT = "hccn_tool -link -g"
STAT_WHAT = "hccn_tool -link_stat -g"
_PREFIX = re.compile(r"\[(?:devid|device) (\d{1,4})\]")
_RECORD = re.compile(r" +([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}) +LINK (UP|DOWN) *")
_FIELDS = ("current time", "link up count", "link down count", "link change records")


@dataclass(frozen=True)
class LinkState:
    up: bool


@dataclass(frozen=True)
class LinkRecord:
    when: str                        # asctime, the node's local time, as printed
    up: bool


@dataclass(frozen=True)
class LinkStat:
    device: int
    current_time: str
    up_count: int
    down_count: Optional[int]        # None on drivers that print no down count
    records: Tuple[LinkRecord, ...]  # newest first

    @property
    def changes(self) -> int:
        """A counter that grows by one per flap: the down count, or on older drivers the up
        count (each flap is a down then an up)."""
        return self.down_count if self.down_count is not None else self.up_count


def parse_link(text: str) -> LinkState:
    lines = [line.strip() for line in bounded_lines(text, LINK_WHAT) if line.strip()]
    states = [line for line in lines if line.lower().startswith("link status")]
    if len(states) != 1:
        raise FaultParseError(LINK_WHAT, f"{len(states)} 'link status' lines, one expected")
    _, _, value = states[0].partition(":")
    value = value.strip().upper()
    if value not in ("UP", "DOWN"):
        raise FaultParseError(LINK_WHAT, f"link status {value[:40]!r} is neither UP nor DOWN")
    return LinkState(value == "UP")


def parse_link_stat(text: str) -> LinkStat:
    device: Optional[int] = None
    fields = {}
    records: List[LinkRecord] = []
    for number, line in enumerate(bounded_lines(text, STAT_WHAT), 1):
        prefix = _PREFIX.match(line.strip())
        if not prefix:
            continue
        this = int(prefix.group(1))
        if device is not None and this != device:
            raise FaultParseError(STAT_WHAT, f"device {this} after device {device}: one port's output expected", number)
        device = this
        rest = line.strip()[prefix.end():]
        record = _RECORD.fullmatch(rest)
        if record:
            records.append(LinkRecord(record.group(1), record.group(2) == "UP"))
            continue
        key, sep, value = rest.partition(":")
        key = key.strip()
        if not sep or key not in _FIELDS:
            raise FaultParseError(STAT_WHAT, f"unknown line {rest.strip()[:60]!r}", number)
        if key in fields:
            raise FaultParseError(STAT_WHAT, f"{key!r} twice", number)
        fields[key] = (number, value.strip())
    if device is None:
        raise FaultParseError(STAT_WHAT, "no '[devid N]' line")
    for required in ("current time", "link up count"):
        if required not in fields:
            raise FaultParseError(STAT_WHAT, f"no {required!r} line")
    up_line, up = fields["link up count"]
    down = None
    if "link down count" in fields:
        down_line, down_text = fields["link down count"]
        down = parse_count(down_text, STAT_WHAT, "link down count", down_line)
    return LinkStat(device, fields["current time"][1], parse_count(up, STAT_WHAT, "link up count", up_line),
                    down, tuple(records))
