"""Readings over time → actions, with the shipped defaults: each fault kind acts after its
persistence, once per episode; ten minutes of healthy readings with corrected ECC errors
and single temperature spikes act on nothing (issue 24, acceptance 2)."""

from __future__ import annotations

import random
import re

import pytest

from ascendctl_runtime.faults import signals as sig
from ascendctl_runtime.faults.evaluator import Evaluator
from ascendctl_runtime.faults.link import parse_link, parse_link_stat
from ascendctl_runtime.faults.logcodes import scan_log
from ascendctl_runtime.faults.npu_ecc import parse_ecc
from ascendctl_runtime.faults.npu_health import parse_health
from ascendctl_runtime.faults.npu_temp import parse_temperature
from ascendctl_runtime.faults.policy import load_policy
from tests.unit.faults_fixtures import body, section, sections

HEALTH_OK, HEALTH_ALARM = (text for _, text in sections("npu-smi_info_t_health.txt", ("/usr/local/bin/npu-smi",))[:2])
ECC_910B = section("npu-smi_info_t_ecc.txt", ("===",), "910B constructed")
COMMON = body("npu-smi_info_t_common_910B.txt")
LINK_UP = next(l for l in body("hccn_tool_a2_checks_mindie_doc.txt").splitlines() if l.startswith("link status:"))
LINK_DOWN = re.findall(r'"(link status: DOWN)"', body("hccn_tool_910B_source_format_strings.txt"))[0]
LINK_STAT_0 = section("hccn_tool_link_stat.txt", ("/usr/local/Ascend/driver/tools/hccn_tool", "# ---"), "-i 0 ")
EI0013_LINE = section("fault_log_lines.txt", ("===",), "#7384")


def ecc_text(single: int, multi: int) -> str:
    text = re.sub(r"(HBM Single Bit Error Count\s+: )\d+", rf"\g<1>{single}", ECC_910B)
    return re.sub(r"(HBM Double Bit Error Count\s+: )\d+", rf"\g<1>{multi}", text)


def temp_text(celsius: int) -> str:
    return COMMON.replace("Temperature(C)                 : 46", f"Temperature(C)                 : {celsius}", 1)


def link_stat_text(up_count: int) -> str:
    return LINK_STAT_0.replace("link up count       : 2", f"link up count       : {up_count}")


class Node:
    """One node's agent, reduced to what the evaluator sees: eight NPUs and eight ports
    read each time from real outputs, the counters against the previous reading."""

    def __init__(self, npus: int = 8):
        self.table = load_policy()
        self.evaluator = Evaluator(self.table)
        self.npus = range(npus)
        self.ecc = {n: parse_ecc(ecc_text(7, 1)) for n in self.npus}
        self.stat = {n: parse_link_stat(link_stat_text(2)) for n in self.npus}
        self.progress = sig.EngineProgress(running=4, generation=1000)
        self.generation = 1000

    def read(self, at, health=None, ecc=None, temp=None, link=None, up_count=None, log="", progress=True,
             holders=None):
        """Readings at `at`; each keyword gives the text for one NPU/port ({n: text}),
        every other NPU/port reads healthy."""
        obs = []
        for n in self.npus:
            obs += sig.from_health(n, parse_health((health or {}).get(n, HEALTH_OK)))
            current = parse_ecc((ecc or {}).get(n, ecc_text(self.ecc[n].single_bit, self.ecc[n].multi_bit)))
            obs += sig.from_ecc(n, self.ecc[n], current)
            self.ecc[n] = current
            obs += sig.from_temperature(n, parse_temperature((temp or {}).get(n, temp_text(46))), self.table.temp_high_c)
            obs += sig.from_link(n, parse_link((link or {}).get(n, LINK_UP) + "\n"))
            stat = parse_link_stat(link_stat_text((up_count or {}).get(n, self.stat[n].up_count)))
            obs += sig.from_link_stat(n, self.stat[n], stat)
            self.stat[n] = stat
            obs += sig.from_hbm_holders(n, (holders or {}).get(n, [sig.HbmHolder(842, 59017)]), own_pids=[842])
        obs += sig.from_log("node", scan_log(log))
        if progress:
            self.generation += 50
        current = sig.EngineProgress(4, self.generation)
        obs += sig.from_progress(self.progress, current)
        self.progress = current
        return [(a.action, a.key, a.subject) for a in self.evaluator.step(at, obs)]


def test_the_captured_alarm_drains_for_its_restart_npu_code_and_alerts_for_the_rest():
    node = Node()
    alarm = {3: HEALTH_ALARM}     # A4025021 NotHandle, 8C03A000 RestartNPU, 8C084E00 FreeRestartNPU
    assert node.read(0, health=alarm) == [("drain", "8C03A000", "npu3"), ("alert", "8C084E00", "npu3")]
    assert node.read(5, health=alarm) == []
    assert node.read(10, health=alarm) == [("alert", "health.alarm", "npu3")]       # Alarm held 3 readings
    assert [node.read(15 + 5 * i, health=alarm) for i in range(10)] == [[]] * 10     # one action per episode


def test_an_episode_clears_after_three_healthy_readings_then_acts_again():
    node = Node()
    alarm = {1: HEALTH_ALARM}
    assert ("drain", "8C03A000", "npu1") in node.read(0, health=alarm)
    node.read(5)
    node.read(10)
    assert node.read(15, health=alarm) == []              # back after 2 healthy readings: same episode
    for t in (20, 25, 30):
        node.read(t)
    assert ("drain", "8C03A000", "npu1") in node.read(35, health=alarm)


def test_multi_bit_ecc_drains_at_once_and_isolates_when_it_comes_back_within_a_day():
    node = Node()
    assert node.read(0, ecc={2: ecc_text(7, 2)}) == [("drain", "ecc.multi_bit", "npu2")]
    for t in range(5, 60, 5):
        assert node.read(t) == []
    assert node.read(3600, ecc={2: ecc_text(7, 3)}) == [("isolate", "ecc.multi_bit", "npu2"),
                                                          ("drain", "ecc.multi_bit", "npu2")]


def test_a_temperature_held_three_readings_alerts_once():
    node = Node()
    hot = {5: temp_text(97)}
    assert node.read(0, temp=hot) == []
    assert node.read(5, temp=hot) == []
    assert node.read(10, temp=hot) == [("alert", "temp.high", "npu5")]
    assert node.read(15, temp=hot) == []


def test_a_port_down_three_readings_drains():
    node = Node()
    down = {4: LINK_DOWN}
    assert [node.read(t, link=down) for t in (0, 5, 10)] == [[], [], [("drain", "link.down", "port4")]]


def test_a_flapping_port_drains_when_its_counter_climbs_three_times_in_ten_minutes():
    node = Node()
    assert node.read(0, up_count={6: 3}) == []
    assert node.read(100, up_count={6: 4}) == []
    assert node.read(200, up_count={6: 5}) == [("drain", "link.flap", "port6")]


def test_flaps_spread_wider_than_the_window_do_nothing():
    node = Node()
    for i, t in enumerate((0, 400, 800, 1200)):
        assert node.read(t, up_count={6: 3 + i}) == []


def test_one_jump_of_three_link_changes_counts_three():
    node = Node()
    assert node.read(0, up_count={0: 5}) == [("drain", "link.flap", "port0")]


def test_a_generation_counter_flat_for_five_minutes_restarts_the_group():
    node = Node()
    node.read(0)
    actions = [node.read(t, progress=False) for t in range(5, 310, 5)]
    assert actions[-1] == [("restart", "engine.stall", "node")] and not any(actions[:-1])


def test_progress_before_five_minutes_is_no_stall():
    node = Node()
    for t in range(0, 1200, 5):
        assert node.read(t, progress=(t % 290 == 0)) == []


def test_hbm_held_by_a_foreign_process_alerts_after_two_readings():
    node = Node()
    foreign = {0: [sig.HbmHolder(842, 59017), sig.HbmHolder(4242, 3000)]}
    assert node.read(0, holders=foreign) == []
    assert node.read(5, holders=foreign) == [("alert", "hbm.foreign", "npu0")]


def test_roce_cqe_errors_in_the_log_restart_then_drain_when_they_keep_coming():
    node = Node()
    assert node.read(0, log=EI0013_LINE) == [("restart", "EI0013", "node")]
    for t in (5, 10, 15):
        node.read(t)
    assert node.read(600, log=EI0013_LINE) == [("restart", "EI0013", "node")]
    for t in (605, 610, 615):
        node.read(t)
    assert node.read(1200, log=EI0013_LINE) == [("drain", "EI0013", "node"), ("restart", "EI0013", "node")]


def test_a_code_the_table_does_not_know_alerts():
    node = Node()
    assert node.read(0, log="[rank0]: EZ9999: [PID: 1] Inner error\n") == [("alert", "EZ9999", "node")]


def test_time_must_not_go_back():
    node = Node()
    node.read(10)
    with pytest.raises(ValueError, match="older than"):
        node.read(5)


def replay(seed: int, hold_spike: bool = False):
    """Ten minutes of healthy readings every 5 s on 8 NPUs and 8 ports, with corrected ECC
    errors and single temperature spikes injected at random."""
    rng = random.Random(seed)
    node = Node()
    actions, noise = [], {"ecc.single_bit": 0, "temp.high": 0}
    last_spike = {n: -10 for n in node.npus}
    for i in range(120):
        ecc, temp = {}, {}
        for n in node.npus:
            if rng.random() < 0.15:
                ecc[n] = ecc_text(node.ecc[n].single_bit + rng.randint(1, 3), node.ecc[n].multi_bit)
                noise["ecc.single_bit"] += 1
            if i - last_spike[n] > 3 and rng.random() < 0.05:     # one reading hot, the next ones not
                temp[n] = temp_text(rng.randint(95, 110))
                last_spike[n] = i
                noise["temp.high"] += 1
        if hold_spike and i in (60, 61, 62):
            temp[0] = temp_text(99)
        actions += node.read(i * 5.0, ecc=ecc, temp=temp)
    return actions, noise


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ten_minutes_of_healthy_readings_with_noise_take_no_action(seed):
    actions, noise = replay(seed)
    assert noise["ecc.single_bit"] > 50 and noise["temp.high"] > 10     # the noise was there
    assert actions == []


def test_the_replay_would_see_a_real_fault():
    actions, _ = replay(1, hold_spike=True)
    assert actions == [("alert", "temp.high", "npu0")]
