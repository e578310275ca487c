"""Durations as logs print them, in seconds: `1836`, `1800s`, `120 s`, `30 min`,
`30min(default)`, `40000ms`, `3600185 milliseconds`, `60 seconds`, `1.5h`.

A number without a unit is in the unit its message uses (HCCL prints seconds, torch's
watchdog milliseconds): the signature that extracts it names that unit.
"""

from __future__ import annotations

import re

SECONDS_PER_UNIT = {
    "ms": 0.001, "msec": 0.001, "msecs": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_DURATION = re.compile(r"\s*(\d{1,15}(?:\.\d{1,9})?)\s*([A-Za-z]{0,12})\s*(?:\(default\))?\s*")


def parse_duration(text: str, default_unit: str = "s") -> float:
    """Seconds in TEXT (a number with an optional unit); ValueError when it is none."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a duration: {text[:40]!r}")
    number, unit = match.groups()
    factor = SECONDS_PER_UNIT.get((unit or default_unit).lower())
    if factor is None:
        raise ValueError(f"unknown unit {unit!r} in {text[:40]!r}")
    return float(number) * factor


def seconds_value(seconds: float) -> int | float:
    """Whole seconds as an int (1800, not 1800.0); fractions rounded to the millisecond."""
    return int(seconds) if seconds == int(seconds) else round(seconds, 3)
