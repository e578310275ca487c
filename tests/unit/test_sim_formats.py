"""The lab simulator's output held against real captures (tests/fixtures, each with its
`# source:` line): same widths, separators and field formats, byte for byte where the
simulator state is set to the capture's values."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from ascendctl_lab import provision
from ascendctl_lab.sim import files, hccn_tool, lspci, npu_smi
from ascendctl_lab.sim import state as st

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture(name: str) -> str:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# source:"), name
    return text.split("\n", 1)[1]


def block_after(text: str, command: str) -> list[str]:
    """Lines printed after the shell line COMMAND, up to the next blank-line-separated
    command (or the end)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if command in line) + 1
    out = []
    for line in lines[start:]:
        if line.startswith(("/usr/local/", "$ ", "# ")):
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def untab(lines: list[str]) -> list[str]:
    """Docs render the leading TAB as 8 spaces."""
    return [re.sub(r"^\t", " " * 8, line) for line in lines]


def idle_910b3_state() -> dict:
    state = st.default_state(node="fixture", chip="910B3", npus=8)
    state["npu_smi_version"] = "24.1.0.3"
    values = [(3389, 98.1, 41), (3380, 93.6, 40), (3379, 86.6, 39), (3380, 96.2, 43),
              (3378, 96.5, 45), (3381, 97.4, 46), (3380, 100.0, 45), (3379, 94.8, 45)]
    for npu, (hbm, power, temp) in zip(state["npus"], values):
        npu.update(hbm_used=hbm, power=power, temp=temp)
    return state


def test_npu_smi_info_910b3_idle_is_byte_identical():
    expected = fixture("npu-smi_info_910B3_8npu_idle.txt").split("\n\nCANN:")[0] + "\n"
    code, out = npu_smi.run(["info"], idle_910b3_state())
    assert code == 0
    assert out == expected
    assert {len(line) for line in out.splitlines()} == {98}


def test_npu_smi_info_910b1_lines_match_capture():
    state = st.default_state(node="fixture", chip="910B1", npus=8)
    state["npu_smi_version"] = "23.0.rc2"
    for npu in state["npus"]:
        npu.update(hbm_used=4175, power=88.4, temp=46)
    state["npus"][1].update(power=92.1, temp=47)
    state["npus"][7].update(hbm_used=4174, power=92.7, temp=48)
    out = npu_smi.run(["info"], state)[1].splitlines()
    captured = [ln for ln in block_after(fixture("npu-smi_info_910B1_8npu_arthurchiao.txt"),
                                         "npu-smi info") if ln != "..."]
    for line in captured:
        assert line in out, line


def test_hbm_used_loses_its_space_at_five_digits_and_process_row_format():
    state = idle_910b3_state()
    procs = [{"npu": 0, "pid": 842, "mem_mb": 59017, "name": "/usr/local/pyth"}]
    out = npu_smi.render_info(state, procs)
    assert "| 0                         | 0000:C1:00.0  | 0           0    / 0          " \
           "62406/ 65536         |" in out
    # FORMATS.md §1, the busy capture's process row.
    assert "| 0       0                 | 842           | /usr/local/pyth          " \
           "| 59017                   |" in out
    assert "No running processes found in NPU 0 " not in out
    assert "| No running processes found in NPU 1" in out


def test_dead_leftover_process_frees_its_hbm():
    state = idle_910b3_state()
    state["processes"] = [{"npu": 0, "pid": 4242, "mem_mb": 59017}]
    gone = npu_smi.run(["info"], state, alive=lambda pid: None)[1]
    alive = npu_smi.run(["info"], state, alive=lambda pid: "/usr/bin/python")[1]
    assert "3389 / 65536" in gone and "4242" not in gone
    assert "62406/ 65536" in alive and "| 4242          | /usr/bin/python" in alive


def test_usages_910b_matches_capture():
    state = st.default_state(node="fixture", chip="910B1", npus=8)
    state["npu_smi_version"] = "23.0.rc2"
    state["npus"][0]["hbm_used"] = 2700          # 4 % of 65536
    expected = block_after(fixture("npu-smi_info_t_usages_910B.txt"), "npu-smi info -t usages -i 0")
    out = npu_smi.run(["info", "-t", "usages", "-i", "0"], state)[1].splitlines()
    assert untab(out) == expected


def test_usages_on_25x_adds_npu_utilization_and_aicube():
    out = npu_smi.run(["info", "-t", "usages", "-i", "0"], st.default_state())[1]
    keys = [line.split(":")[0].strip() for line in out.splitlines() if line.strip()]
    assert keys[-3:] == ["NPU Utilization(%)", "Aicube Usage Rate(%)", "Chip ID"]


def test_common_910b_matches_capture():
    state = st.default_state(node="fixture", chip="910B1", npus=8)
    npu = state["npus"][1]
    npu.update(hbm_used=2700, temp=46, power=93.4, mcu_temp=38)
    expected = block_after(fixture("npu-smi_info_t_common_910B.txt"), "npu-smi info -t common -i 1")
    out = npu_smi.run(["info", "-t", "common", "-i", "1"], state)[1].splitlines()
    assert untab(out) == expected


def test_health_ok_and_alarm_match_capture_with_tabs():
    text = fixture("npu-smi_info_t_health.txt")
    blocks = text.split("/usr/local/bin/npu-smi info -i 0 -c 0 -t health\n")
    ok_expected = blocks[1].rstrip("\n") + "\n"
    alarm_expected = blocks[2].split("\n\n/usr/local/bin/")[0] + "\n"
    state = st.default_state()
    assert npu_smi.run(["info", "-t", "health", "-i", "0", "-c", "0"], state)[1] == ok_expected
    state["npus"][0].update(health="Alarm", error_codes=st.ALARM_ERROR_CODES,
                            error_info=st.ALARM_ERROR_INFO)
    assert npu_smi.run(["info", "-t", "health", "-i", "0", "-c", "0"], state)[1] == alarm_expected


def test_invalid_card_id_matches_capture():
    text = fixture("npu-smi_info_t_health.txt")
    expected = text.split("/usr/local/bin/npu-smi info -i 0 -t board\n")[1].rstrip("\n") + "\n"
    state = st.default_state(npus=8)
    state["visible_npus"] = 0
    code, out = npu_smi.run(["info", "-t", "board", "-i", "0"], state)
    assert code != 0 and out == expected


def test_driver_not_loaded_prints_8005():
    errors = fixture("npu-smi_error_outputs.txt")
    state = st.default_state()
    state["driver_loaded"] = False
    code, out = npu_smi.run(["info"], state)
    assert code != 0 and out.strip() in errors.splitlines()


def test_missing_install_status_appends_the_driver_warning():
    errors = fixture("npu-smi_error_outputs.txt")
    out = npu_smi.run(["info"], st.default_state(), install_complete=False)[1]
    assert out.splitlines()[-1] in errors.splitlines()


def test_topo_matches_capture():
    state = st.default_state(node="fixture", chip="910B1", npus=8)
    for npu, cpus in zip(state["npus"], ["144-167", "0-23", "144-167", "0-23", "96-119",
                                         "48-71", "96-119", "48-71"]):
        npu["cpu_affinity"] = cpus
    expected = block_after(fixture("npu-smi_info_t_topo_910B.txt"), "npu-smi info -t topo")
    assert npu_smi.run(["info", "-t", "topo"], state)[1].splitlines() == expected


def test_board_lines_use_the_capture_key_format_and_order():
    captured = block_after(fixture("npu-smi_info_t_board_910A.txt"),
                           "npu-smi info -i 0 -t board")
    out = npu_smi.run(["info", "-t", "board", "-i", "0"], st.default_state())[1].splitlines()
    keys = [line[:33] for line in out]
    positions = [keys.index(line[:33]) for line in captured]
    assert positions == sorted(positions)
    assert all(re.match(r"^\t.{30} : \S", line) for line in out)
    assert "\tPCI Device ID                  : 0xD802" in out


def test_chip_board_and_mapping_match_the_a2_doc():
    text = fixture("npu-smi_info_m_and_board_c_A2_A3.txt")
    state = st.default_state(chip="910B4", npus=2)
    mapping = npu_smi.run(["info", "-m"], state)[1].splitlines()
    doc_map = block_after(text, "npu-smi info -m")
    assert untab(mapping[:4]) == doc_map[:4]
    board = npu_smi.run(["info", "-t", "board", "-i", "0", "-c", "0"], state)[1].splitlines()
    doc_board = block_after(text, "npu-smi info -t board -i 0 -c 0")
    assert untab(board[:4]) == doc_board[:4]


def test_list_and_help():
    out = npu_smi.run(["info", "-l"], st.default_state())[1]
    assert out.startswith("\tTotal Count                    : 8\n\n\tNPU ID")
    assert out.count("\tChip Count                     : 1\n") == 8
    help_expected = fixture("npu-smi_info_h.txt").split("$ npu-smi info -h\n")[1]
    assert npu_smi.run(["info", "-h"], st.default_state())[1] == help_expected


# ---- hccn_tool ----------------------------------------------------------------------

def test_hccn_ip_link_health_netdetect_gateway_tls_match_mindie_doc():
    doc = fixture("hccn_tool_a2_checks_mindie_doc.txt")
    ips = "".join(hccn_tool.fmt_ip(f"11.12.165.8{i}", "255.255.255.0") for i in range(8))
    assert ips.splitlines() == block_after(doc, "do hccn_tool -i $i -ip -g; done")
    assert hccn_tool.fmt_link(True) == "link status: UP\n" and "link status: UP" in doc
    assert hccn_tool.fmt_net_health("Success").strip() in doc
    gateways = "".join(hccn_tool.fmt_gateway("11.12.165.1", i) for i in range(8))
    assert gateways.splitlines() == block_after(doc, "do hccn_tool -i $i -gateway -g ; done")
    tls = "".join(hccn_tool.fmt_tls(i, 0) for i in range(8))
    assert tls.splitlines() == block_after(doc, "-tls -g ; done | grep switch")
    source = fixture("hccn_tool_910B_source_format_strings.txt")
    assert '"netdetect addr: %s"' in source
    assert hccn_tool.fmt_netdetect("11.12.165.1") == "netdetect addr: 11.12.165.1\n"
    assert '"mtu:%u"' in source and hccn_tool.fmt_mtu(4200) == "mtu:4200\n"
    for status in hccn_tool.NET_HEALTH:
        assert f'"{status}"' in source


def test_hccn_ping_matches_capture():
    expected = block_after(fixture("hccn_tool_ping.txt"),
                           "hccn_tool -i 3 -ping -g address 29.1.137.205")
    out = hccn_tool.fmt_ping(3, "29.1.137.205", [1.418, 0.034, 0.040])
    assert out.splitlines() == expected
    lost = hccn_tool.fmt_ping(0, "198.19.1.20", [None, None, None]).splitlines()
    assert lost == ["device 0 PING 198.19.1.20",
                    "3 packets transmitted, 0 received, 100.00% packet loss"]


def test_hccn_link_stat_matches_capture():
    expected = block_after(fixture("hccn_tool_link_stat.txt"),
                           "hccn_tool -i 0 -link_stat -g")
    stamps = [line.split("]    ")[1].rsplit("    ", 1) for line in expected[3:]]
    records = [{"time": time.mktime(time.strptime(when, "%a %b %d %H:%M:%S %Y")),
                "up": what == "LINK UP"} for when, what in reversed(stamps)]
    now = time.mktime(time.strptime("Wed Aug  2 03:36:43 2022", "%a %b %d %H:%M:%S %Y"))
    out = hccn_tool.fmt_link_stat(0, now, records, with_down_count=False)

    # The capture's weekdays do not match its dates (a hand-made test fixture); asctime()
    # computes them, so compare with the weekday names taken out.
    def no_weekday(lines: list[str]) -> list[str]:
        return [re.sub(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) ", "", line) for line in lines]

    assert no_weekday(out.splitlines()) == no_weekday(expected)
    newer = hccn_tool.fmt_link_stat(0, now, records, with_down_count=True).splitlines()
    assert newer[2] == "[devid 0]link down count     : 2"
    assert hccn_tool.fmt_link_stat(1, now, [], False).splitlines()[-1] == \
        "[devid 1]link change records : NA"


def test_hccn_optical_uses_the_capture_keys_and_widths():
    expected = block_after(fixture("hccn_tool_optical_910A.txt"), "hccn_tool -i 0 -optical -g")
    out = hccn_tool.fmt_optical().splitlines()
    assert len(out) == len(expected)
    for mine, real in zip(out, expected):
        assert mine.split(":")[0] == real.split(":")[0]


def test_hccn_lldp_has_the_capture_tlvs():
    expected = block_after(fixture("hccn_tool_lldp.txt"), "hccn_tool -i 3 -lldp -g")
    out = hccn_tool.fmt_lldp("aa:bb:cc:dd:ee:ff", "400GE1/1/20:2", "198.19.1.1", 9216)
    tlvs = [line for line in expected if line.endswith("TLV")]
    assert [line for line in out.splitlines() if line.endswith("TLV")] == tlvs
    assert "\tIfname: 400GE1/1/20:2" in out.splitlines()
    assert "Ifname: 400GE1/1/20:2" in untab(out.splitlines())[3]


def test_hccn_conf_matches_capture_format():
    expected = block_after(fixture("hccn_conf_arthurchiao.txt"), "cat /etc/hccn.conf")[:5]
    conf = provision.hccn_conf(["29.1.137.205"], "255.255.0.0", "29.1.0.1", "29.1.0.1")
    assert conf.splitlines() == expected


def test_ip_without_address_prints_nothing():
    assert hccn_tool.fmt_ip(None, None) == ""


# ---- version files, devices, lspci -----------------------------------------------------

def test_driver_version_file_is_the_real_25_3_rc1_capture():
    text = fixture("version_info_files_910B_hosts.txt")
    block = text.split("/usr/local/Ascend/driver/version.info\n", 2)[2].split("/usr/local/")[0]
    real = [line.strip() for line in block.splitlines() if line.strip()]
    assert files.key_values(st.DEFAULT_DRIVER).splitlines() == real


def test_version_cfg_matches_capture_layout():
    text = fixture("version_info_files_910B_hosts.txt")
    real = [re.sub(r"^\s*\d+\s+", "", line) for line in
            text.split("(this is /usr/local/Ascend/ascend-toolkit/latest/version.cfg content)\n")[1]
            .split("atb version.info")[0].splitlines() if line.strip()]
    assert files.version_cfg("7.6.0.1.220:8.0.0").splitlines() == real


def test_rendered_files_are_at_the_real_paths():
    rendered = files.render(st.default_state())
    assert set(rendered) >= {
        "/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/firmware/version.info",
        "/etc/ascend_install.info",
        "/usr/local/Ascend/ascend-toolkit/8.5.1/x86_64-linux/ascend_toolkit_install.info"}
    assert "Driver_Install_Status=complete" in rendered["/etc/ascend_install.info"]


def test_sync_writes_toolkit_layout_and_removes_it_when_cann_is_missing(tmp_path):
    state = st.default_state()
    files.sync_files(state, str(tmp_path))
    latest = tmp_path / "usr/local/Ascend/ascend-toolkit/latest"
    info = latest / "x86_64-linux/ascend_toolkit_install.info"
    assert "version=8.5.1" in info.read_text()
    assert (tmp_path / "usr/local/Ascend/ascend-toolkit/latest/version.cfg").exists()
    state["toolkit"] = None
    files.sync_files(state, str(tmp_path))
    assert not (tmp_path / "usr/local/Ascend/ascend-toolkit").exists()
    assert (tmp_path / "usr/local/Ascend/driver/version.info").exists()


def test_lspci_lines_have_the_capture_shape():
    real = fixture("lspci_grep_acce_910A.txt").splitlines()[1]
    pattern = re.escape(real).replace("3d", "[0-9a-f]{2}").replace("d801", "d802")
    out = lspci.render(st.default_state(), [])[1].splitlines()
    npus = [line for line in out if "d802" in line]
    assert len(npus) == 8 and all(re.fullmatch(pattern, line) for line in npus)
    assert lspci.render(st.default_state(), ["-n", "-d", "19e5:d802"])[1].splitlines()[0] == \
        "01:00.0 1200: 19e5:d802 (rev 20)"


@pytest.mark.parametrize("flag,shown,hidden", [
    ("sriov", "IOVCtl:\tEnable+", "IOVCtl:\tEnable-"),
    ("acs", "ACSCtl:\tSrcValid+", "ACSCtl:\tSrcValid-"),
])
def test_lspci_shows_bios_settings(flag, shown, hidden):
    state = st.default_state()
    default = lspci.render(state, ["-vvv"])[1]
    assert hidden in default and shown not in default
    state["bios"][flag] = True
    assert shown in lspci.render(state, ["-vvv"])[1]


def test_lspci_above4g_off_leaves_bars_unassigned():
    state = st.default_state()
    assert "<unassigned>" not in lspci.render(state, ["-v"])[1]
    state["bios"]["above4g"] = False
    out = lspci.render(state, ["-v", "-s", "c1:00.0"])[1]
    assert out.count("Memory at <unassigned> (64-bit, prefetchable) [disabled]") == 3
