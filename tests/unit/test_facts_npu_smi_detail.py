"""`npu-smi info -t board|health|usages|common|memory|topo`, `-m`, `-l` beyond the captures
of tests/facts/: the helpers over parsed values, multi-chip and A3 forms built with the
source's format strings, and error detection."""

from pathlib import Path

from ascendctl.facts.npu_smi_detail import (
    npu_smi_error,
    parse_board,
    parse_cpu_list,
    parse_health,
    parse_list,
    parse_mapping,
    parse_topo,
    parse_usages,
)

FACTS = Path(__file__).resolve().parents[1] / "facts"


def case(fact: str, name: str) -> str:
    return (FACTS / fact / f"{name}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def test_soc_names_as_huawei_documents_them():
    # A2 SoC = {Chip Type}{Chip Name}; A3 SoC = {Chip Name}_{NPU Name}
    assert parse_board(case("chip_board", "a2_doc_first_lines")).soc_name == "Ascend910B4"
    assert parse_board(case("chip_board", "a3_doc_first_lines")).soc_name == "Ascend910_9392"
    assert parse_board(case("chip_board", "910A_chip")).soc_name == "Ascend910A"
    assert parse_board(case("npu_smi_board", "910A_card")).soc_name is None


def test_health_healthy_only_when_ok_without_codes():
    assert parse_health(case("npu_smi_health", "ok")).healthy
    assert not parse_health(case("npu_smi_health", "alarm_three_codes")).healthy
    assert not parse_health(case("npu_smi_health", "invalid_card")).healthy


def test_usages_two_chips_chip_id_at_the_end():
    one = case("npu_smi_usages", "910B")
    one = one[one.index("        DDR Capacity(MB)"):]
    text = "\tNPU ID : 0\n\tChip Count : 2\n\n" + one + "\n" + one.replace(
        "HBM Usage Rate(%)              : 4", "HBM Usage Rate(%)              : 91").replace(
        "Chip ID                        : 0", "Chip ID                        : 1")
    chips = parse_usages(text)
    assert [(c.chip_id, c.hbm_usage_pct) for c in chips] == [(0, 4), (1, 91)]


def test_topo_affinity_lookup():
    topo = parse_topo(case("topology", "910B_cpu_affinity"))
    assert topo.has_cpu_affinity
    assert topo.affinity_of(0) == frozenset(range(144, 168)) and topo.affinity_of(5) == frozenset(range(48, 72))
    assert topo.affinity_of(8) is None


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


def test_mapping_mcu_rows():
    rows = parse_mapping(case("mapping", "a2_with_mcu"))
    assert [r.chip_name.lower() == "mcu" for r in rows] == [False, True, False, True]


def test_list_server_form_from_the_source_format():
    # server form per the source: `\t%-30s : %d\n\n` Total Count, then NPU ID / Chip Count blocks
    text = "\t%-30s : %d\n\n" % ("Total Count", 8) + "".join(
        "\t%-30s : %d\n\t%-30s : %d\n\n" % ("NPU ID", i, "Chip Count", 1) for i in range(8))
    lst = parse_list(text)
    assert lst.total_count == 8 and [(e.npu_id, e.chip_count) for e in lst.npus] == [(i, 1) for i in range(8)]


def test_error_detection():
    assert npu_smi_error("This device does not support querying spod-info.\n")
    assert npu_smi_error("") == "no output"
    assert npu_smi_error("\tHealth Status                  : OK\n") is None
