"""The fault parsers on recorded output (tests/fixtures/), and on hostile input."""

from __future__ import annotations

import re
import time

import pytest
from tests.unit.faults_fixtures import body, section, sections
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendctl_runtime.faults.link import parse_link, parse_link_stat
from ascendctl_runtime.faults.logcodes import scan_log
from ascendctl_runtime.faults.npu_ecc import parse_ecc
from ascendctl_runtime.faults.npu_health import parse_health
from ascendctl_runtime.faults.npu_temp import parse_temperature
from ascendctl_runtime.faults.text import MAX_LINE_CHARS, MAX_TEXT_CHARS, FaultParseError

HEALTH = "npu-smi_info_t_health.txt"
NPU_SMI = ("/usr/local/bin/npu-smi",)
LINK_STAT = "hccn_tool_link_stat.txt"
HCCN = ("/usr/local/Ascend/driver/tools/hccn_tool", "# ---")


# --- npu-smi info -t health ------------------------------------------------------------

def test_health_ok_captured():
    reading = parse_health(sections(HEALTH, NPU_SMI)[0][1])
    assert (reading.status, reading.codes, reading.information, reading.healthy) == ("OK", (), (), True)


def test_health_alarm_captured_with_its_codes_and_continued_information():
    reading = parse_health(sections(HEALTH, NPU_SMI)[1][1])
    assert reading.status == "Alarm"
    assert reading.codes == ("A4025021", "8C03A000", "8C084E00")
    assert reading.information == (
        "ascend_monitor adda heart beat lost error",
        "node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally",
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
    )
    assert not reading.healthy


def test_health_of_a_missing_card_is_npu_smis_error():
    with pytest.raises(FaultParseError, match="Invalid card id"):
        parse_health(sections(HEALTH, NPU_SMI)[2][1])


def test_health_when_the_driver_is_not_initialised():
    text = body("npu-smi_error_outputs.txt")
    line = next(l for l in text.splitlines() if "dcmi module initialize failed" in l)
    with pytest.raises(FaultParseError, match="dcmi module initialize failed"):
        parse_health(line + "\n")


def test_health_source_format_950_key():
    # npucli show_ascend_chip_health_state: printf("\t%-30s : %s\n", "Health", ...)
    assert parse_health("\t%-30s : %s\n" % ("Health", "Critical")).status == "Critical"


# --- npu-smi info -t ecc -----------------------------------------------------------------

ECC = "npu-smi_info_t_ecc.txt"


def test_ecc_vendor_example_all_zero():
    reading = parse_ecc(section(ECC, ("===",), "950 doc"))
    assert (reading.single_bit, reading.multi_bit, reading.single_bit_total, reading.multi_bit_isolated_pages) == (0, 0, 0, 0)


def test_ecc_910b_counters_single_and_multi_bit_apart():
    reading = parse_ecc(section(ECC, ("===",), "910B constructed"))
    assert (reading.single_bit, reading.multi_bit) == (7, 1)
    assert (reading.single_bit_total, reading.multi_bit_total) == (42, 2)
    assert (reading.single_bit_isolated_pages, reading.multi_bit_isolated_pages) == (0, 1)


def test_ecc_first_generation_ddr_lines_are_not_hbm():
    reading = parse_ecc(section(ECC, ("===",), "MindCluster doc"))
    assert (reading.single_bit, reading.multi_bit) == (0, 0)


# --- temperature --------------------------------------------------------------------------

def test_temperature_from_common_is_the_chips_not_the_mcus():
    text = body("npu-smi_info_t_common_910B.txt")
    assert parse_temperature(text).chip_c == 46        # the MCU section says 38


@pytest.mark.parametrize("key", ["NPU Temperature (C)", "Temperature (C)"])
def test_temperature_from_t_temp_source_format(key):
    # npucli npu_info_print.c print_chip_temp_info: printf("\t%-30s : %d\n", key, temp)
    assert parse_temperature("\t%-30s : %d\n" % (key, 52)).chip_c == 52


@pytest.mark.parametrize("text", ["\tTemperature(C) : hot\n", "\tNPU ID : 0\n", "\tTemperature(C) : 123456\n"])
def test_temperature_refuses_what_it_does_not_know(text):
    with pytest.raises(FaultParseError):
        parse_temperature(text)


# --- hccn_tool -link -g / -link_stat -g -----------------------------------------------------

def test_link_up_from_the_vendor_doc():
    text = body("hccn_tool_a2_checks_mindie_doc.txt")
    line = next(l for l in text.splitlines() if l.startswith("link status:"))
    assert parse_link(line + "\n").up


def test_link_down_from_the_source_string():
    text = body("hccn_tool_910B_source_format_strings.txt")
    down = re.search(r'TOOL_PRINT_INFO\("(link status: DOWN)"\)', text).group(1)
    assert not parse_link(down + "\n").up


@pytest.mark.parametrize("text", ["link status: MAYBE\n", "", "link status: UP\nlink status: UP\n"])
def test_link_refuses_what_it_does_not_know(text):
    with pytest.raises(FaultParseError):
        parse_link(text)


def test_link_stat_captured_records_newest_first():
    stat = parse_link_stat(section(LINK_STAT, HCCN, "-i 0 "))
    assert (stat.device, stat.current_time, stat.up_count, stat.down_count) == (0, "Wed Aug  2 03:36:43 2022", 2, None)
    assert [(r.when, r.up) for r in stat.records] == [
        ("Tue Aug  1 14:44:40 2022", False), ("Tue Aug  1 14:43:40 2022", True),
        ("Tue Aug  1 14:43:40 2022", False), ("Tue Aug  1 14:43:26 2022", True)]
    assert stat.changes == 2                      # no down count: the up count


def test_link_stat_mindcluster_doc_device_prefix():
    stat = parse_link_stat(section(LINK_STAT, HCCN, "mind-cluster docs variant"))
    assert (stat.device, stat.up_count, len(stat.records)) == (0, 2, 3)


def test_link_stat_newer_driver_down_count_from_the_source_format():
    # hccn_tool/tool.c: "[devid %d]link down count     : %llu\n" between the up count and the records
    text = section(LINK_STAT, HCCN, "-i 4 ").replace(
        "[devid 4]link up count       : 2\n",
        "[devid 4]link up count       : 2\n" + "[devid %d]link down count     : %d\n" % (4, 5))
    stat = parse_link_stat(text)
    assert (stat.down_count, stat.changes) == (5, 5)


def test_link_stat_no_records_na_form():
    # tool.c: "[devid %d]link change records : NA\n" when the driver kept none
    text = ("[devid 1]current time        : Wed Aug  2 03:36:43 2022\n[devid 1]link up count       : 0\n"
            "[devid 1]link down count     : 0\n[devid 1]link change records : NA\n")
    assert parse_link_stat(text).records == ()


# --- what each parser refuses, with the message that says why ---------------------------

REFUSALS = {
    parse_health: [
        ("\tHealth Status                  : Fine\n", "none of OK"),
        ("\tHealth Status                  : Alarm\n\tError Code                     : 8C03A000 ZZZZ\n", "'ZZZZ' is not 4 to 8 hex"),
        ("\tError Code                     : NA\n", "no 'Health Status' line"),
        ("\tHealth Status : OK\n\tHealth Status : OK\n", "a second health status"),
    ],
    parse_ecc: [
        ("\tHBM Single Bit Error Count               : 3\n", "no 'HBM Double Bit Error Count' line"),
        ("\tHBM Single Bit Error Count : -1\n\tHBM Double Bit Error Count : 0\n", "is not a count"),
        ("\tHBM Single Bit Error Count : " + "9" * 30 + "\n\tHBM Double Bit Error Count : 0\n", "is not a count"),
        ("This device does not support querying ecc.\n", "does not support querying"),
    ],
    parse_link_stat: [
        ("", "no '\\[devid N\\]' line"),
        ("[devid 0]current time : x\n[devid 1]link up count : 2\n", "device 1 after device 0"),
        ("[devid 0]current time : x\n", "no 'link up count' line"),
        ("[devid 0]current time : x\n[devid 0]link up count : many\n", "is not a count"),
        ("[devid 0]bogus : 1\n", "unknown line"),
    ],
}


@pytest.mark.parametrize("parse,text,message",
                         [(parse, text, message) for parse, rows in REFUSALS.items() for text, message in rows])
def test_parsers_refuse_what_they_do_not_know(parse, text, message):
    with pytest.raises(FaultParseError, match=message):
        parse(text)


# --- log codes ----------------------------------------------------------------------------

LOGS = "fault_log_lines.txt"


@pytest.mark.parametrize("heading,expected", [
    ("#7384", [("EI0013", "cann")]),
    ("#1815 (issue title", [("EJ0002", "cann")]),
    ("#3162", [("EI0009", "cann")]),
    ("#405", [("EJ0003", "cann")]),
    ("DS-02", []),
    ("troubleshooting_0009", [("80E01809", "event")]),
    ("troubleshooting_0008", [("80E01809", "event")]),
])
def test_log_codes_on_public_lines(heading, expected):
    found = scan_log(section(LOGS, ("===",), heading))
    assert [(c.code, c.kind) for c in found] == expected


def test_log_codes_give_line_numbers_and_no_lookalikes():
    text = "EI00131: no\nEI0013x: no\nXEI0013: no\nfoo\n" + section(LOGS, ("===",), "#7384")
    assert [(c.code, c.line) for c in scan_log(text)] == [("EI0013", 5)]


def test_log_scan_reads_only_the_head_of_a_huge_line():
    assert scan_log("x" * (MAX_LINE_CHARS + 10) + " EI0013: late\n") == ()


# --- hostile input ------------------------------------------------------------------------

PARSERS = [parse_health, parse_ecc, parse_temperature, parse_link, parse_link_stat]


@pytest.mark.parametrize("parse", PARSERS)
def test_oversized_input_is_a_parse_error(parse):
    with pytest.raises(FaultParseError, match="more than"):
        parse("a" * (MAX_LINE_CHARS + 1) + "\n")
    with pytest.raises(FaultParseError, match="more than"):
        parse("ab : 1\n" * (MAX_TEXT_CHARS // 7 + 1))


@pytest.mark.parametrize("parse", PARSERS + [scan_log])
def test_worst_case_lines_parse_fast(parse):
    nasty = [" " * (MAX_LINE_CHARS - 20) + "LINK UP", "[devid 0]" + " " * (MAX_LINE_CHARS - 30) + "x",
             "E" * (MAX_LINE_CHARS - 1), "event_id=0x" + "0" * (MAX_LINE_CHARS - 20), ":" * (MAX_LINE_CHARS - 1)]
    started = time.perf_counter()
    for line in nasty:
        try:
            parse((line + "\n") * 50)
        except FaultParseError:
            pass
    assert time.perf_counter() - started < 2.0


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]:0123456789 \t\nabcdevilnkLINKUPDOWNHealthStatusErrorCodeE")), max_size=400))
def test_any_text_parses_or_is_a_parse_error(text):
    for parse in PARSERS:
        try:
            parse(text)
        except FaultParseError:
            pass
    scan_log(text)
