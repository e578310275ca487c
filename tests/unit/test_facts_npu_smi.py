"""`npu-smi info` main table: every capture parses to what a person reads in it."""

from pathlib import Path

import pytest

from ascendctl.facts.chip import ChipFamily, classify_chip
from ascendctl.facts.npu_smi import TableLayout, parse_npu_smi_info
from ascendctl.facts.npu_smi_detail import parse_board

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def test_910b3_idle_8npu():
    info = parse_npu_smi_info(load("npu-smi_info_910B3_8npu_idle.txt"))
    assert info.ok and info.error is None
    assert info.tool_version == "24.1.0.3" and info.driver_version == "24.1.0.3"
    assert info.layout == TableLayout.A2
    assert info.npu_ids == (0, 1, 2, 3, 4, 5, 6, 7)
    c0 = info.chips[0]
    assert (c0.npu_id, c0.chip_id, c0.name, c0.health) == (0, 0, "910B3", "OK")
    assert (c0.power_w, c0.temp_c, c0.bus_id) == (98.1, 41, "0000:C1:00.0")
    assert (c0.hugepages_used, c0.hugepages_total) == (0, 0)
    assert (c0.aicore_pct, c0.ddr_used_mb, c0.ddr_total_mb) == (0, 0, 0)
    assert (c0.hbm_used_mb, c0.hbm_total_mb, c0.hbm_free_mb) == (3389, 65536, 65536 - 3389)
    c6 = info.chips[6]
    assert (c6.power_w, c6.temp_c, c6.bus_id, c6.hbm_used_mb) == (100.0, 45, "0000:41:00.0", 3380)
    c7 = info.chips[7]
    assert (c7.bus_id, c7.hbm_used_mb, c7.power_w) == ("0000:42:00.0", 3379, 94.8)
    assert info.processes == () and info.idle_npus == (0, 1, 2, 3, 4, 5, 6, 7)
    assert not info.driver_incomplete_warning
    assert classify_chip(info).family == ChipFamily.A2_910B


def test_910b4_five_digit_hbm_loses_its_space():
    info = parse_npu_smi_info(load("npu-smi_info_910B4_partial_1panel.txt"))
    assert info.driver_version == "24.1.1"
    assert [(c.npu_id, c.name, c.hbm_used_mb, c.hbm_total_mb) for c in info.chips] == [
        (0, "910B4", 26838, 32768), (1, "910B4", 29356, 32768)]
    assert info.chips[1].power_w == 87.0 and info.chips[1].temp_c == 30
    assert classify_chip(info).family == ChipFamily.A2_910B


def test_910b1_blog_with_elisions():
    info = parse_npu_smi_info(load("npu-smi_info_910B1_8npu_arthurchiao.txt"))
    assert info.driver_version == "23.0.rc2"
    assert info.npu_ids == (0, 1, 7)   # the author elided NPUs 2-6 with '...'
    c7 = info.chips[-1]
    assert (c7.name, c7.power_w, c7.temp_c, c7.bus_id, c7.hbm_used_mb) == ("910B1", 92.7, 48, "0000:42:00.0", 4174)


def test_first_generation_910_prints_910b_but_has_ddr():
    info = parse_npu_smi_info(load("npu-smi_info_910A_8npu.txt"))
    assert info.driver_version == "24.1.0" and len(info.chips) == 8
    assert {c.name for c in info.chips} == {"910B"}
    c0, c3 = info.chips[0], info.chips[3]
    assert (c0.ddr_used_mb, c0.ddr_total_mb, c0.hbm_used_mb, c0.hbm_total_mb) == (1197, 13553, 1365, 32768)
    assert (c3.ddr_used_mb, c3.ddr_total_mb, c3.hbm_used_mb) == (2472, 15567, 3)
    ident = classify_chip(info)
    assert ident.family == ChipFamily.GEN1_910 and not ident.family.supported


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


def test_310p_recognised_as_unsupported():
    info = parse_npu_smi_info(load("npu-smi_info_310P3.txt"))
    assert info.layout == TableLayout.INFERENCE and info.driver_version == "25.3.rc1"
    (c,) = info.chips
    assert (c.npu_id, c.chip_id, c.name, c.health) == (6, 0, "310P3", "OK")
    assert c.power_w is None and c.temp_c == 50          # Power 'NA'
    assert (c.ddr_used_mb, c.ddr_total_mb) == (1839, 21525)
    assert c.hbm_used_mb is None and c.hbm_total_mb is None
    assert info.idle_npus == (6,)
    assert classify_chip(info).family == ChipFamily.INFERENCE_310


def test_310_atlas300():
    info = parse_npu_smi_info(load("npu-smi_info_310_atlas300_3000.txt"))
    (c,) = info.chips
    assert (c.name, c.power_w, c.temp_c, c.hugepages_used, c.hugepages_total) == ("310", 12.8, 61, 0, 969)
    assert (c.ddr_used_mb, c.ddr_total_mb) == (577, 7759)
    assert classify_chip(info).family == ChipFamily.INFERENCE_310


def test_dcmi_8005_is_an_error():
    text = load("npu-smi_error_outputs.txt")
    info = parse_npu_smi_info(text[text.index("dcmi module"):text.index("#   npu-exporter")])
    assert not info.ok and info.error_code == -8005
    assert info.error == "dcmi module initialize failed. ret is -8005"
    block2 = text[text.index("DrvMngGetConsoleLogLevel"):text.index("# (3)")]
    assert parse_npu_smi_info(block2).error_code == -8005


def test_blank_output_is_an_error():
    # faultdiag fixture: `npu-smi info` printed nothing at all
    text = load("faultdiag_npu_info_before_910A.txt")
    start = text.index("/usr/local/bin/npu-smi info\n") + len("/usr/local/bin/npu-smi info\n")
    output = text[start:text.index("/usr/local/Ascend/driver/tools/hccn_tool -i 0 -stat -g")]
    assert output.strip() == ""
    info = parse_npu_smi_info(output)
    assert not info.ok and info.chips == () and "no device table" in info.error


def test_invalid_card_is_an_error():
    info = parse_npu_smi_info("Invalid card id.\nError parameter of -i\n")
    assert not info.ok and "Invalid card id." in info.error


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
    assert len(info.processes_of(0)) == 5 and info.processes_of(1) == ()


def test_process_row_with_empty_name_in_container():
    rows = ["| %-7d %-18d| %-13d | %-24s | %-24d |" % (0, 0, 1234, "", 61234)]
    info = parse_npu_smi_info(_with_process_rows(rows))
    (p,) = info.processes
    assert (p.pid, p.name, p.memory_mb) == (1234, "", 61234)


def test_a3_two_dies_from_deployer_docstring():
    text = load("ascend-deployer_new_npu_checks_py.txt")
    block = text[text.index("        +---------"):text.index('        """\n        lines =')]
    info = parse_npu_smi_info(block)
    assert info.layout == TableLayout.A3 and info.tool_version == "25.3.rc1.b020"
    assert [(c.npu_id, c.chip_id, c.phy_id, c.name, c.bus_id) for c in info.chips] == [
        (0, 0, 0, "Ascend910", "0000:9D:00.0"), (0, 1, 1, "Ascend910", "0000:9F:00.0")]
    assert info.chips[0].power_w == 161.9 and info.chips[1].power_w is None     # die 1 prints '-'
    assert (info.chips[0].hbm_used_mb, info.chips[1].hbm_used_mb) == (3099, 2885)
    assert classify_chip(info).family == ChipFamily.A3_910_93


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


def test_950_v2_layout():
    text = load("npu-smi_950_official_doc_examples.txt")
    block = text[text.index("+-------", text.index("querying-basic-information")):]
    block = block[:block.index("```")]
    info = parse_npu_smi_info(block)
    assert info.layout == TableLayout.V2
    (c,) = info.chips
    assert (c.npu_id, c.name, c.health, c.power_w, c.bus_id) == (0, "xxx", "OK", 204.4, "0000:91:00.0")
    assert (c.hbm_used_mb, c.hbm_total_mb) == (4439, 86016)
    assert info.idle_npus == (0,)
    assert classify_chip(info).family == ChipFamily.GEN_950


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
