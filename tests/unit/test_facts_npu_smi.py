"""`npu-smi info` beyond the captures of tests/facts/npu_smi/: the generation each table
shows, edited tables (process rows, warnings, widths, health values) and the source's
vocabulary."""

from pathlib import Path

import pytest

from ascendctl.facts.chip import ChipFamily, classify_chip
from ascendctl.facts.npu_smi import TableLayout, parse_npu_smi_info
from ascendctl.facts.npu_smi_detail import parse_board

TESTS = Path(__file__).resolve().parents[1]
FIX = TESTS / "fixtures"


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def case(name: str) -> str:
    """A captured `npu-smi info` of tests/facts/npu_smi/ (its values: the .json next to it)."""
    return (TESTS / "facts" / "npu_smi" / f"{name}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


# the generation each captured `npu-smi info` (tests/facts/npu_smi/) alone decides on
CHIP_FAMILY = {
    "910B3_8npu_idle": ChipFamily.A2_910B, "910B4_five_digit_hbm": ChipFamily.A2_910B,
    "910B1_arthurchiao_elided": ChipFamily.A2_910B,
    "910A_8npu_prints_910B": ChipFamily.GEN1_910,       # on-card DDR: first generation
    "310P3": ChipFamily.INFERENCE_310, "310_atlas300": ChipFamily.INFERENCE_310,
    "a3_two_dies_docstring": ChipFamily.A3_910_93, "950_v2_layout_doc": ChipFamily.GEN_950,
}


@pytest.mark.parametrize("name,family", sorted(CHIP_FAMILY.items()))
def test_chip_family_of_each_captured_table(name, family):
    info = parse_npu_smi_info(case(name))
    assert info.ok
    ident = classify_chip(info)
    assert ident.family == family and ident.family.supported == (family in (ChipFamily.A2_910B,
                                                                            ChipFamily.A3_910_93))


def test_error_outputs_are_not_ok():
    for name in ("dcmi_8005", "dcmi_8005_no_device_access", "invalid_card", "blank"):
        info = parse_npu_smi_info(case(name))
        assert not info.ok and info.chips == () and classify_chip(info).family == ChipFamily.UNKNOWN


def test_properties_over_the_idle_table():
    info = parse_npu_smi_info(case("910B3_8npu_idle"))
    assert info.npu_ids == tuple(range(8)) and info.chips[0].hbm_free_mb == 65536 - 3389
    assert str(info.driver) == "24.1.0.3" and [c.bus_id for c in info.chips if c.npu_id == 6][0] == "0000:41:00.0"


def test_bare_910b_with_zero_ddr_is_decided_by_board_pci_id():
    text = load("npu-smi_info_910A_8npu.txt")
    for used, total in (("1197 / 13553", "0    / 0    "), ):
        text = text.replace(used, total)
    info = parse_npu_smi_info(text.replace("2411 / 15665", "0    / 0    "))
    board = load("npu-smi_info_t_board_910A.txt")
    card = parse_board(board[board.index("/usr/local/bin/npu-smi info -i 0 -t board"):])
    assert card.pci_device_id == 0xD801
    assert classify_chip(info, board=card).family == ChipFamily.GEN1_910
    chip = parse_board(board[:board.index("/usr/local/bin/npu-smi info -i 0 -t board")])
    assert chip.chip_name == "910A"
    # with only the chip-level board: Chip Name 910A says first generation too
    only_two = parse_npu_smi_info("\n".join(l for l in text.splitlines()[:11]))
    assert classify_chip(only_two, chip_board=chip).family == ChipFamily.GEN1_910


def test_trailing_driver_warning_line():
    text = load("npu-smi_info_910B3_8npu_idle.txt").split("CANN:")[0]
    warning = load("npu-smi_error_outputs.txt").splitlines()
    line = next(l for l in warning if l.startswith("[WARNING]The driver package"))
    info = parse_npu_smi_info(text + line + "\n")
    assert info.driver_incomplete_warning and info.ok and len(info.chips) == 8


def _with_process_rows(rows: list[str]) -> str:
    text = load("npu-smi_info_910B3_8npu_idle.txt").split("CANN:")[0]
    lines = text.splitlines()
    i = next(n for n, l in enumerate(lines) if "No running processes found in NPU 0" in l)
    return "\n".join(lines[:i] + rows + lines[i + 1:]) + "\n"


def test_process_rows_truncated_names_and_many_per_npu():
    # the FORMATS.md verbatim row, then TP8 rank processes (~117 MB each) also on NPU 0, in the
    # source's `| %-7d %-18d| %-13d | %-24s | %-24lu |`
    rows = ["| 0       0                 | 842           | /usr/local/pyth          | 59017                   |"]
    for pid in (843, 844, 845):
        rows.append("| %-7d %-18d| %-13d | %-24s | %-24d |" % (0, 0, pid, "/usr/local/pyth", 117))
    rows.append("| %-7d %-18d| %-13d | %-24s | %-24d |" % (0, 0, 911, "hlt_host_devmm_", 2))
    info = parse_npu_smi_info(_with_process_rows(rows))
    assert info.idle_npus == (1, 2, 3, 4, 5, 6, 7)
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 0, 842, "/usr/local/pyth", 59017), (0, 0, 843, "/usr/local/pyth", 117),
        (0, 0, 844, "/usr/local/pyth", 117), (0, 0, 845, "/usr/local/pyth", 117),
        (0, 0, 911, "hlt_host_devmm_", 2)]
    assert [p.npu_id for p in info.processes] == [0] * 5


def test_process_row_with_empty_name_in_container():
    rows = ["| %-7d %-18d| %-13d | %-24s | %-24d |" % (0, 0, 1234, "", 61234)]
    info = parse_npu_smi_info(_with_process_rows(rows))
    (p,) = info.processes
    assert (p.pid, p.name, p.memory_mb) == (1234, "", 61234)


def _a3_table(processes: dict[int, list[tuple[int, int, str, int]]]) -> str:
    """An A3 8x2 table printed with the npucli source's format strings (v1 header)."""
    out = ["+" + "-" * 97 + "+",
           "| %s %-24s Version: %-53s |" % ("npu-smi", "25.3.rc1", "25.3.rc1"),
           "+---------------------------+---------------+-----------------------------------------------------+",
           "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
           "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)         |",
           "+===========================+===============+=====================================================+"]
    for npu in range(8):
        for die in (0, 1):
            power = "%-11.1f" % (160.0 + npu) if die == 0 else "%-11s" % "-"
            out.append("| %-5d %-20s| %-13s | %s %-17d %-6d/ %-13d |" % (npu, "Ascend910", "OK", power, 34, 0, 0))
            out.append("| %-5d %-20d| %-13s | %-11d %-5d/ %-10d %-6d/ %-13d |"
                       % (die, 2 * npu + die, "0000:%02X:00.0" % (0x9D + 2 * npu + die), 0, 0, 0,
                          30000 + 100 * npu + die, 65536))
            out.append("+" + "-" * 97 + "+" if die == 0 else
                       "+===========================+===============+=====================================================+")
    out += ["+---------------------------+---------------+-----------------------------------------------------+",
            "| NPU     Chip              | Process id    | Process name             | Process memory(MB)       |",
            "+===========================+===============+=====================================================+"]
    for npu in range(8):
        rows = processes.get(npu, [])
        for chip, pid, name, mem in rows:
            out.append("| %-7d %-18d| %-13d | %-24s | %-24d |" % (npu, chip, pid, name, mem))
        if not rows:
            out.append("| No running processes found in NPU %-7d" % npu + " " * 54 + "|")
        out.append("+===========================+===============+=====================================================+")
    return "\n".join(out) + "\n"


def test_a3_sixteen_dies_with_processes():
    procs = {0: [(0, 4001, "", 28000), (1, 4002, "", 28000)], 5: [(1, 4100, "python3", 120)]}
    info = parse_npu_smi_info(_a3_table(procs))
    assert info.layout == TableLayout.A3 and len(info.chips) == 16 and info.npu_ids == tuple(range(8))
    assert [c.phy_id for c in info.chips] == list(range(16))
    assert info.chips[11].chip_id == 1 and info.chips[11].phy_id == 11 and info.chips[11].npu_id == 5
    assert info.chips[11].hbm_used_mb == 30501
    assert [(p.npu_id, p.chip_id, p.pid, p.name) for p in info.processes] == [
        (0, 0, 4001, ""), (0, 1, 4002, ""), (5, 1, 4100, "python3")]
    assert info.idle_npus == (1, 2, 3, 4, 6, 7)


def test_wider_table_widths_do_not_matter():
    # 26.0.rc2 re-spaces the columns (116 wide): widen every cell and parse the same values
    base = load("npu-smi_info_910B3_8npu_idle.txt").split("CANN:")[0]
    wide = "\n".join(l.replace("  ", "     ") if l.startswith("|") else l.replace("-", "--")
                     for l in base.splitlines())
    assert max(len(l) for l in wide.splitlines()) > 116
    a, b = parse_npu_smi_info(base), parse_npu_smi_info(wide)
    assert a.chips == b.chips and b.driver_version == "24.1.0.3"


@pytest.mark.parametrize("health", ["Warning", "Alarm", "Critical", "UNKNOWN"])
def test_health_values(health):
    text = load("npu-smi_info_910B3_8npu_idle.txt").split("CANN:")[0]
    row = "| 3     910B3               | OK            | 96.2        43                0    / 0             |"
    assert row in text
    info = parse_npu_smi_info(text.replace(row, row.replace("| OK            |", f"| {health:<13} |")))
    assert info.chips[3].health == health and info.chips[2].health == "OK"


def test_parser_vocabulary_matches_the_npucli_source():
    from ascendctl.facts.npu_smi import HEALTH_VALUES, _DRIVER_WARNING
    source = load("npu-smi_source_format_strings.txt")
    assert '{ "OK", "Warning", "Alarm", "Critical", "UNKNOWN" }' in source
    assert HEALTH_VALUES == ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
    assert _DRIVER_WARNING in source.replace('"\\\n            "', "")
    # the source's process row and idle row formats parse
    row = "| %-7d %-18d| %-13d | %-24s | %-24lu |".replace("lu", "d") % (3, 0, 5555, "python3", 4096)
    idle = "| No running processes found in NPU %-7d                      " % 4 + \
        "                                 |"
    info = parse_npu_smi_info(_with_process_rows([row, idle]))
    assert [(p.npu_id, p.pid, p.memory_mb) for p in info.processes] == [(3, 5555, 4096)]
    assert 4 in info.idle_npus
