"""The HBM watchdog's decision, on real captured npu-smi tables."""

from __future__ import annotations

import re
from pathlib import Path

from ascendctl.facts.npu_smi import parse_npu_smi_info
from ascendctl_runtime.watchdog import Watchdog, WatchdogConfig, fullest_chip

FIXTURES = Path(__file__).parent.parent / "fixtures"


def capture(name: str) -> str:
    return "".join((FIXTURES / name).read_text().splitlines(keepends=True)[1:])


IDLE = capture("npu-smi_info_910B3_8npu_idle.txt")
# The same table with the NPUs that idled at 3380 MB (1, 3 and 6) nearly full:
# "64300/ 65536" (a five-digit used value loses its space, as on real hardware).
NEARLY_FULL = re.sub(r"3380 / 65536        ", "64300/ 65536        ", IDLE, count=4)


class Clock:
    def __init__(self):
        self.now = 10_000.0

    def __call__(self):
        return self.now


def make(text_sequence, **overrides):
    texts = iter(text_sequence)
    config = WatchdogConfig(threshold=0.97, consecutive=2, startup_grace_seconds=60,
                            cooldown_seconds=300, **overrides)
    clock = Clock()
    dog = Watchdog(config, read=lambda: (parse_npu_smi_info(next(texts)), ""), clock=clock)
    return dog, clock


def test_fixture_edit_really_fills_an_npu():
    info = parse_npu_smi_info(NEARLY_FULL)
    npu_id, fraction, used, total = fullest_chip(info)
    assert used == 64300 and total == 65536 and fraction > 0.97
    assert fullest_chip(parse_npu_smi_info(IDLE))[1] < 0.06


def test_idle_never_restarts():
    dog, _ = make([IDLE] * 5)
    assert [dog.step(3600) for _ in range(5)] == [None] * 5


def test_restart_after_consecutive_readings_then_cooldown():
    dog, clock = make([NEARLY_FULL] * 6)
    assert dog.step(3600) is None                   # first reading above: wait
    reason = dog.step(3600)                         # second: restart
    assert reason and "HBM 64300/65536 MB" in reason and "NPU" in reason
    clock.now += 30
    assert dog.step(3600) is None and dog.step(3600) is None   # within cooldown
    clock.now += 600
    assert dog.step(3600) is not None               # still full after the cooldown


def test_no_decision_while_starting_or_inactive():
    dog, _ = make([NEARLY_FULL] * 4)
    assert dog.step(None) is None      # unit not active: not even read
    assert dog.step(10) is None        # within the start-up grace
    assert dog.step(10) is None
    assert dog.over_count == 0


def test_a_dip_below_resets_the_count():
    dog, _ = make([NEARLY_FULL, IDLE, NEARLY_FULL, NEARLY_FULL])
    assert [dog.step(3600) for _ in range(4)][-1] is not None
    assert dog.over_count == 0
