"""`npu-smi info -t board|health|memory|usages|common|topo`, `-m`, `-l` captures."""

from pathlib import Path

from ascendctl.facts.npu_smi_detail import (
    npu_smi_error,
    parse_board,
    parse_common,
    parse_cpu_list,
    parse_health,
    parse_list,
    parse_mapping,
    parse_memory,
    parse_topo,
    parse_usages,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def cut(text: str, start: str, end: str | None = None) -> str:
    i = text.index(start)
    j = text.index(end, i + len(start)) if end else len(text)
    return text[i:j]


def test_board_card_level_910a():
    text = load("npu-smi_info_t_board_910A.txt")
    card = parse_board(cut(text, "/usr/local/bin/npu-smi info -i 0 -t board"))
    assert (card.npu_id, card.software_version, card.firmware_version) == (0, "23.0.5", "7.1.0.7.220")
    assert (card.compatibility, card.pcie_bus, card.chip_count) == ("OK", "0000:61:00.0", 1)
    assert (card.pci_vendor_id, card.pci_device_id) == (0x19E5, 0xD801)
    assert card.chip_id is None and card.error is None


def test_board_chip_level_910a():
    text = load("npu-smi_info_t_board_910A.txt")
    chip = parse_board(cut(text, "/usr/local/bin/npu-smi info -i 0 -c 0 -t board",
                           "/usr/local/bin/npu-smi info -i 0 -t board"))
    assert (chip.npu_id, chip.chip_id, chip.chip_type, chip.chip_name, chip.chip_version) == (
        0, 0, "Ascend", "910A", "V1")
    assert chip.firmware_version == "7.1.0.7.220" and chip.pcie_bus == "0000:61:00.0"
    assert chip.soc_name == "Ascend910A"


def test_board_chip_level_a2_and_a3_doc():
    text = load("npu-smi_info_m_and_board_c_A2_A3.txt")
    a2 = parse_board(cut(text, "# A2 (doc", "# A3 (doc"))
    a3 = parse_board(cut(text, "# A3 (doc", "# Doc's rule"))
    assert (a2.chip_type, a2.chip_name, a2.npu_name, a2.soc_name) == ("Ascend", "910B4", None, "Ascend910B4")
    assert (a3.chip_type, a3.chip_name, a3.npu_name, a3.soc_name) == (None, "Ascend910", "9392", "Ascend910_9392")


def test_board_error_invalid_card():
    text = load("faultdiag_npu_info_after_910A.txt")
    board = parse_board(cut(text, "/usr/local/bin/npu-smi info -i 0 -t board", "/usr/local/bin/npu-smi info -i 0 -c 0"))
    assert board.error == "Invalid card id." and board.chip_name is None


def test_health_ok_alarm_and_950_label():
    text = load("npu-smi_info_t_health.txt")
    blocks = text.split("/usr/local/bin/npu-smi")[1:]
    ok, alarm, invalid = (parse_health(b) for b in blocks)
    assert (ok.status, ok.error_codes, ok.error_information, ok.healthy) == ("OK", (), (), True)
    assert alarm.status == "Alarm" and not alarm.healthy
    assert alarm.error_codes == ("A4025021", "8C03A000", "8C084E00")
    assert alarm.error_information == (
        "ascend_monitor adda heart beat lost error",
        "node type=process-manager, sensor type=General Software, event state=The process start failed or "
        "exit abnormally",
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.")
    assert invalid.status is None and invalid.error == "Invalid card id."
    doc = load("npu-smi_950_official_doc_examples.txt")
    h950 = parse_health(cut(doc, "        NPU ID", "```"))
    assert h950.status == "OK" and h950.error_codes == ()


def test_usages_910b_and_910a():
    b = parse_usages(load("npu-smi_info_t_usages_910B.txt"))
    (u,) = b
    assert (u.chip_id, u.hbm_capacity_mb, u.hbm_usage_pct, u.ddr_capacity_mb, u.aicore_usage_pct) == (0, 65536, 4, 0, 0)
    assert dict(u.values)["Aivector Usage Rate(%)"] == "0"
    (a,) = parse_usages(load("npu-smi_info_t_usages_910A.txt"))
    assert (a.hbm_capacity_mb, a.ddr_capacity_mb, a.ddr_usage_pct) == (31129, 13553, 6)


def test_usages_two_chips_chip_id_at_the_end():
    one = cut(load("npu-smi_info_t_usages_910B.txt"), "        DDR Capacity(MB)")
    text = "\tNPU ID : 0\n\tChip Count : 2\n\n" + one + "\n" + one.replace(
        "HBM Usage Rate(%)              : 4", "HBM Usage Rate(%)              : 91").replace(
        "Chip ID                        : 0", "Chip ID                        : 1")
    chips = parse_usages(text)
    assert [(c.chip_id, c.hbm_usage_pct) for c in chips] == [(0, 4), (1, 91)]


def test_common_with_mcu_section():
    (c,) = parse_common(load("npu-smi_info_t_common_910B.txt"))
    assert (c.chip_id, c.hbm_usage_pct, c.aicore_freq_mhz, c.aicore_count, c.temperature_c, c.power_w) == (
        0, 4, 1800, 24, 46, 93.4)
    doc = load("npu-smi_950_official_doc_examples.txt")
    (d,) = parse_common(cut(doc, "NPU ID                         : 0\nMemory Usage", "```"))
    assert (d.hbm_usage_pct, d.aicore_count, d.temperature_c, d.power_w) == (3, 32, 65, 298.6)


def test_memory_950_doc():
    doc = load("npu-smi_950_official_doc_examples.txt")
    m = parse_memory(cut(doc, "        NPU ID                         : 0\n        DDR Capacity", "```"))
    assert (m.ddr_capacity_mb, m.hbm_capacity_mb, m.hbm_clock_mhz, m.hbm_temperature_c, m.hbm_manufacturer_id) == (
        0, 131072, 3200, 63, "0x5A")
    assert parse_memory("Invalid card id.\n").error == "Invalid card id."


def test_topo_910b_affinity():
    topo = parse_topo(load("npu-smi_info_t_topo_910B.txt"))
    assert topo.has_cpu_affinity and [d.device_id for d in topo.devices] == list(range(8))
    assert topo.affinity_of(0) == frozenset(range(144, 168))
    assert topo.affinity_of(1) == frozenset(range(0, 24))
    assert topo.affinity_of(5) == frozenset(range(48, 72))
    assert dict(topo.devices[0].links) == {0: "X", **{i: "HCCS" for i in range(1, 8)}}


def test_topo_a3_without_affinity_column():
    # source: `\t   ` + `Phy-ID%-5d` per device + `NIC%-9d` columns, and no CPU Affinity on ARM A3
    head = "\t   " + "".join("Phy-ID%-5d" % i for i in range(4)) + "".join("NIC%-9d" % i for i in range(2))
    rows = ["Phy-ID%-5d" % i + "".join("%-11s" % ("X" if i == j else "SIO" if i // 2 == j // 2 else "HCCS")
                                       for j in range(4)) + "%-12s%-12s" % ("PIX", "NA") for i in range(4)]
    topo = parse_topo("\n".join([head, *rows, "", "Legend:", "  X    = Self"]))
    assert not topo.has_cpu_affinity and topo.affinity_of(2) is None
    assert dict(topo.devices[1].links) == {0: "SIO", 1: "X", 2: "HCCS", 3: "HCCS"}


def test_cpu_list():
    assert parse_cpu_list("0-23,96-119") == frozenset([*range(24), *range(96, 120)])
    assert parse_cpu_list("5") == frozenset({5})


def test_mapping_a2_with_mcu_and_910a():
    rows = parse_mapping(load("npu-smi_info_m_and_board_c_A2_A3.txt"))
    assert [(r.npu_id, r.chip_id, r.logic_id, r.chip_name, r.is_mcu) for r in rows] == [
        (0, 0, 0, "Ascend 910B4", False), (0, 1, None, "Mcu", True),
        (1, 0, 1, "Ascend 910B4", False), (1, 1, None, "Mcu", True)]
    rows = parse_mapping(load("npu-smi_info_m_910A.txt"))
    assert len(rows) == 8 and rows[7].logic_id == 7 and rows[7].chip_name == "Ascend 910A"


def test_mapping_950_with_phy_id_column():
    doc = load("npu-smi_950_official_doc_examples.txt")
    (row,) = parse_mapping(cut(doc, "NPU ID          Slot ID", "```"))
    assert (row.npu_id, row.chip_id, row.phy_id, row.chip_name) == (0, 0, 0, "xxx")


def test_list_server_and_950():
    # server form per the source: `\t%-30s : %d\n\n` Total Count, then NPU ID / Chip Count blocks
    text = "\t%-30s : %d\n\n" % ("Total Count", 8) + "".join(
        "\t%-30s : %d\n\t%-30s : %d\n\n" % ("NPU ID", i, "Chip Count", 1) for i in range(8))
    lst = parse_list(text)
    assert lst.total_count == 8 and [(e.npu_id, e.chip_count) for e in lst.npus] == [(i, 1) for i in range(8)]
    doc = load("npu-smi_950_official_doc_examples.txt")
    l950 = parse_list(cut(doc, "Total Count", "```"))
    assert l950.total_count == 1 and l950.npus[0].product_name == "A5 PCIe Card" and l950.npus[0].chip_count is None


def test_error_detection():
    assert npu_smi_error("This device does not support querying spod-info.\n")
    assert npu_smi_error("") == "no output"
    assert npu_smi_error("\tHealth Status                  : OK\n") is None
