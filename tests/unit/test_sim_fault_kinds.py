"""The hardware fault kinds of the lab (ecc-singlebit, ecc-multibit, chip-alarm,
temp-spike, roce-flap, plog-error) as the simulator prints them: each output parses with
the node-side fault parsers (runtime/ascendctl_runtime/faults/) to the injected values,
and the ECC and temperature lines have the layout of the recorded outputs in
tests/fixtures/."""

from __future__ import annotations

import re
import time

import pytest

from ascendctl.errors import InputError
from ascendctl_lab import faults
from ascendctl_lab.sim import hccn_tool, npu_smi
from ascendctl_lab.sim import state as st
from ascendctl_runtime.faults.link import parse_link, parse_link_stat
from ascendctl_runtime.faults.logcodes import scan_log
from ascendctl_runtime.faults.npu_ecc import parse_ecc
from ascendctl_runtime.faults.npu_health import parse_health
from ascendctl_runtime.faults.npu_temp import parse_temperature
from ascendctl_runtime.faults.policy import load_policy
from tests.unit.faults_fixtures import body, section


def smi(state: dict, *argv: str, spikes: st.TempSpikes | None = None) -> str:
    code, out = npu_smi.run(["info", *argv], state, spikes=spikes)
    assert code == 0, out
    return out


def ecc(state: dict, npu: int) -> str:
    return smi(state, "-t", "ecc", "-i", str(npu), "-c", "0")


def shape(line: str) -> tuple[str, str]:
    """A key/value line with its value taken out: the layout (tab, key, padding, ' : ')."""
    key, sep, _ = line.partition(" : ")
    return key, sep


# ---- ECC ---------------------------------------------------------------------------------

def test_ecc_healthy_is_all_zero_in_the_910b_fixture_layout():
    fixture = section("npu-smi_info_t_ecc.txt", ("===",), "910B constructed").splitlines()
    out = ecc(st.default_state(), 3).splitlines()
    assert [shape(line) for line in out] == [shape(line) for line in fixture]
    # byte for byte, once the fixture's chosen counters are zero (its NPU ID is 3 too)
    assert out == fixture[:1] + [re.sub(r" : \d+$", " : 0", line) for line in fixture[1:]]
    assert parse_ecc("\n".join(out)) == parse_ecc(body("npu-smi_info_t_ecc.txt").split(
        "=== 910B")[0].split("\n", 1)[1])      # the 950 manual's all-zero example


def test_ecc_910b_output_is_the_fixture_byte_for_byte_at_its_values():
    fixture = section("npu-smi_info_t_ecc.txt", ("===",), "910B constructed")
    state = st.default_state()
    state["npus"][3]["hbm_ecc"] = dict(zip(st.ECC_FIELDS, (7, 1, 42, 2, 0, 1, 0, 0)))
    assert ecc(state, 3) == fixture


def test_ecc_singlebit_counts_one_per_injection_and_leaves_multibit():
    state = st.default_state()
    edit = faults.STATE_EDITS["ecc-singlebit"]
    for expected in (1, 2, 3):
        edit(state, 5)
        reading = parse_ecc(ecc(state, 5))
        assert (reading.single_bit, reading.single_bit_total) == (expected, expected)
        assert (reading.multi_bit, reading.multi_bit_total) == (0, 0)
    assert parse_ecc(ecc(state, 4)).single_bit == 0          # only that NPU


def test_ecc_multibit_counts_double_bit_and_its_total():
    state = st.default_state()
    faults.STATE_EDITS["ecc-multibit"](state, 0)
    faults.STATE_EDITS["ecc-multibit"](state, 0)
    faults.STATE_EDITS["ecc-singlebit"](state, 0)
    reading = parse_ecc(ecc(state, 0))
    assert (reading.multi_bit, reading.multi_bit_total) == (2, 2)
    assert (reading.single_bit, reading.single_bit_total) == (1, 1)
    assert reading.multi_bit_isolated_pages == 0


def test_ecc_of_a_state_written_before_the_counters_existed():
    state = st.default_state()
    del state["npus"][2]["hbm_ecc"]              # a lab provisioned by an older simulator
    assert parse_ecc(ecc(state, 2)).single_bit == 0
    faults.STATE_EDITS["ecc-singlebit"](state, 2)
    assert parse_ecc(ecc(state, 2)).single_bit == 1


# ---- chip-alarm --------------------------------------------------------------------------

def test_chip_alarm_health_and_main_table():
    state = st.default_state()
    faults.STATE_EDITS["chip-alarm"](state, 6)
    out = smi(state, "-t", "health", "-i", "6", "-c", "0")
    reading = parse_health(out)
    assert reading.status == "Alarm"
    assert reading.codes == ("80E01801",)
    # no driver text for the code: npu-smi prints it in decimal
    assert reading.information == (str(0x80E01801),)
    assert out.splitlines()[1] == "\tError Code                     : 80E01801"
    row = [line for line in smi(state).splitlines() if line.startswith("| 6 ")][0]
    assert row.split("|")[2].strip() == "Alarm"
    assert parse_health(smi(state, "-t", "health", "-i", "5", "-c", "0")).healthy


def test_chip_alarm_codes_come_from_the_policy_defaults_and_act():
    table = load_policy(None)
    actions = {rule.action for rule in table.rules_for("80E01801")}
    assert "restart" in actions
    assert "80E01801" in faults.FAULT_KINDS["chip-alarm"]


def test_npu_unhealthy_still_prints_the_captured_alarm():
    state = st.default_state()
    state["npus"][0].update(health="Alarm", error_codes=st.ALARM_ERROR_CODES,
                            error_info=st.ALARM_ERROR_INFO)
    reading = parse_health(smi(state, "-t", "health", "-i", "0", "-c", "0"))
    assert reading.codes == ("A4025021", "8C03A000", "8C084E00")
    assert reading.information == tuple(st.ALARM_ERROR_INFO)


# ---- temp-spike --------------------------------------------------------------------------

def test_temp_line_is_print_chip_temp_info_on_a_server():
    state = st.default_state()
    state["npus"][1]["temp"] = 52
    out = smi(state, "-t", "temp", "-i", "1", "-c", "0")
    # docs/faults.md's example line (npu_info_print.c: "\t%-30s : %d\n")
    assert out == "\tNPU Temperature (C)            : 52\n"
    captured = body("npu-smi_info_t_health.txt").splitlines()[1]   # a real \t%-30s line
    assert captured.startswith("\tHealth Status")
    assert len(shape(out.rstrip("\n"))[0]) == len(shape(captured)[0]) == 31
    assert parse_temperature(out).chip_c == 52


def test_temp_spike_shows_for_exactly_one_temp_read(tmp_path):
    state = st.default_state()
    normal = state["npus"][2]["temp"]
    now = [1000.0]
    spikes = st.TempSpikes(str(tmp_path / "temp-spike"), clock=lambda: now[0])
    st.write_spike(2, 1, 105, directory=spikes.directory)

    def temp(npu: int) -> int:
        return parse_temperature(smi(state, "-t", "temp", "-i", str(npu), "-c", "0",
                                     spikes=spikes)).chip_c

    def table_temp(npu: int) -> int:
        row = [line for line in smi(state, spikes=spikes).splitlines()
               if line.startswith(f"| {npu} ")][0]
        return int(row.split("|")[3].split()[1])

    assert table_temp(2) == 105                 # pending: the table shows it, keeps it
    assert temp(1) == state["npus"][1]["temp"]  # another NPU: not spiked
    assert temp(2) == 105                       # the one spiked read
    assert table_temp(2) == 105                 # the rest of the same reading
    assert parse_temperature(smi(state, "-t", "common", "-i", "2",
                                 spikes=spikes)).chip_c == 105
    assert temp(2) == normal                    # the next -t temp read: normal again
    now[0] += st.SPIKE_WINDOW_S + 0.1
    assert table_temp(2) == normal
    assert temp(2) == normal


def test_temp_spike_file_as_the_fault_writes_it(tmp_path):
    spikes = st.TempSpikes(str(tmp_path))
    (tmp_path / "0").write_text(f"1 {faults.SPIKE_C} 0\n")    # temp-spike's input
    assert spikes.take(0) == 105
    assert spikes.take(0) is None


# ---- roce-flap ---------------------------------------------------------------------------

def flap_events(tmp_path, port: int, cycles: int, start: float) -> str:
    directory = tmp_path / "link-events"
    directory.mkdir(exist_ok=True)
    lines = []
    for i in range(cycles):
        lines += [f"{start + 5 * i:.9f} 0", f"{start + 5 * i + 2:.9f} 1"]
    (directory / str(port)).write_text("\n".join(lines) + "\n")
    return str(directory)


def test_flap_events_grow_the_link_stat_counters_newest_first(tmp_path):
    state = st.default_state()
    start = time.time() - 600
    state["link_history"]["3"] = [{"time": start - 100, "up": True}]
    directory = flap_events(tmp_path, 3, 4, start)
    records = sorted(state["link_history"]["3"] + st.link_events(3, directory),
                     key=lambda r: r["time"])
    stat = parse_link_stat(hccn_tool.fmt_link_stat(3, time.time(), records, True))
    assert (stat.up_count, stat.down_count) == (5, 4)
    assert [r.up for r in stat.records] == [True, False] * 4 + [True]
    assert stat.records[0].when == time.asctime(time.localtime(start + 17))
    more = st.link_events(3, flap_events(tmp_path, 3, 20, start))
    stat = parse_link_stat(hccn_tool.fmt_link_stat(3, time.time(), records[:1] + more, True))
    assert stat.changes == 20                                  # every flap counted
    assert len(stat.records) == hccn_tool.LINK_STAT_MAX_IDX    # the driver keeps 10


def test_link_stat_reads_the_flap_events_of_the_node(tmp_path, monkeypatch):
    state = st.default_state(npus=2)
    directory = flap_events(tmp_path, 1, 3, time.time() - 60)
    monkeypatch.setattr(st, "LINK_EVENTS_DIR", directory)
    code, out = hccn_tool.run(["-i", "1", "-link_stat", "-g"], state)
    assert code == 0
    assert parse_link_stat(out).down_count == 3
    assert parse_link_stat(hccn_tool.run(["-i", "0", "-link_stat", "-g"], state)[1]).down_count == 0


def test_link_events_ignore_torn_lines():
    assert st.parse_link_events("12.5 0\n13.5 1\n14.") == [
        {"time": 12.5, "up": False}, {"time": 13.5, "up": True}]


def test_link_down_line_parses():
    assert parse_link(hccn_tool.fmt_link(False)).up is False
    assert parse_link(hccn_tool.fmt_link(True)).up is True


# ---- plog-error --------------------------------------------------------------------------

def test_plog_line_carries_the_fixture_text_and_scans_as_ei0013(tmp_path):
    import subprocess
    import sys

    text = faults.PLOG_TEXT.format(server="198.18.3.10", dev=0, ip="198.19.3.1",
                                   peer_server="198.18.3.11", peer_ip="198.19.3.9")
    fixture = body("fault_log_lines.txt")
    # the fixture's text, with the fixture's values
    assert faults.PLOG_TEXT.format(server="xx.xx.xx.199", dev=3, ip="10.20.13.9",
                                   peer_server="xx.xx.xx.195", peer_ip="10.20.13.5") == \
        fixture.split("2026-03-13-06:55:06.896.485 ", 1)[1].splitlines()[0]
    out = subprocess.run([sys.executable, "-c", faults.PLOG_WRITER, str(tmp_path), text],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/plog-\d+_\d{17}\.log", out)
    line = open(out).read()
    assert re.fullmatch(r"\[ERROR\] HCCL\(\d+,python\):\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} "
                        + re.escape(text) + "\n", line)
    # the prefix has the shape of the fixture's plog line
    plog = [ln for ln in fixture.splitlines() if ln.startswith("[ERROR] HCCL(")][0]
    prefix = re.compile(r"\[ERROR\] HCCL\(\d+,python\):\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} ")
    assert prefix.match(plog) and prefix.match(line)
    codes = scan_log(line)
    assert [(c.code, c.kind) for c in codes] == [("EI0013", "cann")]


# ---- the fault table ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ecc-singlebit", "ecc-multibit", "chip-alarm",
                                  "temp-spike", "roce-flap"])
def test_new_per_unit_kinds_take_an_npu_or_port_number(kind):
    assert kind in faults.PER_UNIT_KINDS
    assert "[VALUE=0]" in faults.FAULT_KINDS[kind]


def test_bad_value_names_the_field():
    with pytest.raises(InputError) as err:
        faults._int("x", 0, "ecc-singlebit", 0, 7)
    assert err.value.field == "VALUE" and "expected a number" in str(err.value)
    with pytest.raises(InputError) as err:
        faults._int("8", 0, "temp-spike", 0, 7)
    assert err.value.field == "VALUE"
    assert set(faults.NO_VALUE_KINDS) <= set(faults.FAULT_KINDS)
    assert set(faults.PER_UNIT_KINDS) <= set(faults.FAULT_KINDS)
    assert set(faults.STATE_EDITS) <= set(faults.FAULT_KINDS)
