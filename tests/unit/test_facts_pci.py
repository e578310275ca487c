"""PCIe evidence for SR-IOV / ACS / Above-4G beyond the captures of tests/facts/pci/: the
inventory's lookups, edited copies of the constructed A2 node, and the DCMI id list."""

from pathlib import Path

from ascendctl.facts.pci import parse_lspci_vvv

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def case(name: str) -> str:
    return (FIX.parent / "facts" / "pci" / f"{name}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def test_constructed_910b_node_is_healthy():
    inv = parse_lspci_vvv(case("a2_8npu_constructed"))
    npus = inv.npus()
    assert len(npus) == 8 and {d.device_id for d in npus} == {0xD802}
    assert [d.address for d in npus][:2] == ["0000:c1:00.0", "0000:c2:00.0"]
    assert npus[0].numa_node == 6 and npus[4].numa_node == 0
    assert all(not d.sriov_on and not d.acs_enabled and d.low_large_bars() == () for d in npus)
    (bridge,) = inv.upstream_bridges(npus[0])
    assert bridge.address == "0000:c0:00.0" and (bridge.secondary_bus, bridge.subordinate_bus) == (0xC1, 0xC2)
    assert bridge.acs_present and not bridge.acs_enabled


def test_sriov_enabled_vfs():
    text = load("lspci_vvv_910B_8npu_constructed.txt")
    text = text.replace("IOVCtl:\tEnable- Migration-", "IOVCtl:\tEnable+ Migration-", 1).replace(
        "Number of VFs: 0", "Number of VFs: 4", 1)
    npus = parse_lspci_vvv(text).npus()
    assert npus[0].sriov_on and npus[0].sriov_num_vfs == 4 and npus[0].sriov_enabled
    assert not any(d.sriov_on for d in npus[1:])


def test_acs_enabled_on_the_root_port():
    text = load("lspci_vvv_910B_8npu_constructed.txt").replace(
        "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-",
        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+", 1)
    inv = parse_lspci_vvv(text)
    (bridge,) = inv.upstream_bridges(inv.npus()[0])
    assert bridge.acs_enabled
    assert [f for f, on in bridge.acs_ctl if on] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    (other,) = inv.upstream_bridges(inv.npus()[2])
    assert not other.acs_enabled


def test_bars_below_4g_or_unassigned():
    text = load("lspci_vvv_910B_8npu_constructed.txt")
    low = text.replace("Region 2: Memory at 20c100000000 (64-bit, prefetchable) [size=2G]",
                       "Region 2: Memory at 80000000 (64-bit, prefetchable) [size=2G]")
    d = parse_lspci_vvv(low).npus()[0]
    assert [(r.index, r.address) for r in d.low_large_bars()] == [(2, 0x80000000)]
    unassigned = text.replace("Region 2: Memory at 20c200000000 (64-bit, prefetchable) [size=2G]",
                              "Region 2: Memory at <unassigned> (64-bit, prefetchable) [size=2G]")
    d2 = parse_lspci_vvv(unassigned).npus()[1]
    assert [(r.index, r.address) for r in d2.low_large_bars()] == [(2, None)]


def test_access_denied_without_root():
    text = ("0000:c1:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d802 (rev 20)\n"
            "\tSubsystem: Huawei Technologies Co., Ltd. Device 3002\n"
            "\tRegion 2: Memory at 20c100000000 (64-bit, prefetchable) [size=2G]\n"
            "\tCapabilities: <access denied>\n")
    (d,) = parse_lspci_vvv(text).devices
    assert d.is_npu and d.device_id == 0xD802 and not d.capabilities_readable
    assert d.regions[0].size == 2 << 30


def test_device_ids_match_the_dcmi_header():
    import re

    from ascendctl.facts.pci import HUAWEI_VENDOR, NPU_DEVICE_IDS
    header = load("pci_device_ids_dcmi_common_h.txt")
    defined = {name: int(v, 16) for name, v in re.findall(r"#define DCMI_D_(\w+?)_DEVICE_ID\s+(0x[0-9a-f]+)", header)}
    assert re.search(r"DCMI_D_CHIP_VENDER_ID\s+0x19e5", header) and HUAWEI_VENDOR == 0x19E5
    assert NPU_DEVICE_IDS[defined["910"]] == "910" and NPU_DEVICE_IDS[defined["910B"]] == "910B"
    assert NPU_DEVICE_IDS[defined["910_93"]] == "910_93" and NPU_DEVICE_IDS[defined["950"]] == "950"
    assert set(defined.values()) <= set(NPU_DEVICE_IDS)
