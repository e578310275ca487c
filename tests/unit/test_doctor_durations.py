"""Durations read with their units, as the logs print them."""

from __future__ import annotations

import pytest

from ascendctl.doctor.durations import parse_duration, seconds_value


@pytest.mark.parametrize("text, unit, seconds", [
    ("1836", "s", 1836),                 # HCCL: a bare number is seconds
    ("1836s", "s", 1836),
    ("120 s", "s", 120),
    ("1800s", "s", 1800),
    ("30min", "s", 1800),                # timeout:30min(default), older CANN
    ("30 min", "s", 1800),
    ("30min(default)", "s", 1800),
    ("2h", "s", 7200),
    ("1.5h", "s", 5400),
    ("500ms", "s", 0.5),
    ("40000ms", "s", 40),
    ("3600000", "ms", 3600),             # torch's watchdog: a bare number is ms
    ("3600185 milliseconds", "s", 3600.185),
    ("60 seconds", "s", 60),
    ("1 second", "s", 1),
    ("5 minutes", "s", 300),
    ("1d", "s", 86400),
])
def test_durations_are_read_with_their_unit(text, unit, seconds):
    assert parse_duration(text, unit) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "min", "30 fortnights", "-5s", "1e3s", "12:30", "30 min 5 s"])
def test_what_is_not_a_duration_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_seconds_are_whole_when_they_can_be():
    assert seconds_value(1800.0) == 1800 and isinstance(seconds_value(1800.0), int)
    assert seconds_value(3600.185) == 3600.185
    assert seconds_value(0.0004) == 0.0
