"""hccn_tool outputs and /etc/hccn.conf, from the captures."""

from pathlib import Path

import pytest

from ascendctl.facts.hccn import (
    parse_gateway,
    parse_hccn_conf,
    parse_ip,
    parse_link,
    parse_link_stat,
    parse_lldp_ifname,
    parse_lldp_max_frame,
    parse_mtu,
    parse_net_health,
    parse_netdetect,
    parse_optical,
    parse_ping,
    parse_speed,
    parse_tls,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def per_command(text: str, marker: str) -> list[str]:
    """Split a capture into the outputs following each command line containing `marker`."""
    parts, current = [], None
    for line in text.splitlines():
        if marker in line and ("hccn_tool" in line):
            if current is not None:
                parts.append("\n".join(current))
            current = []
        elif current is not None:
            current.append(line)
    if current is not None:
        parts.append("\n".join(current))
    return parts


MINDIE = "hccn_tool_a2_checks_mindie_doc.txt"


def test_ip_per_device_from_faultdiag_capture():
    outs = per_command(load("hccn_tool_ip_and_stat_8dev.txt"), "-ip -g")
    assert [parse_ip(o).ip for o in outs] == [f"10.10.0.{10 + i}" for i in range(8)]
    assert {parse_ip(o).netmask for o in outs} == {"255.255.255.0"}


def test_ip_empty_output_means_unconfigured():
    outs = per_command(load("faultdiag_npu_info_before_910A.txt"), "-ip -g")
    assert [parse_ip(o).ip for o in outs] == ["192.161.200.10", "192.161.201.10", None]
    assert parse_ip(outs[2]).netmask is None


def test_ip_loop_output_and_vnic():
    doc = load(MINDIE)
    loop = doc[doc.index("ipaddr:11.12.165.80"):doc.index("$ for i in {0..7}; do hccn_tool -i $i -ping")]
    first = "\n".join(loop.splitlines()[:2])
    assert parse_ip(first).ip == "11.12.165.80" and parse_ip(first).netmask == "255.255.255.0"
    vnic = "vnic link status: UP\nvnic ipaddr: 192.168.5.3\nvnic netmask: 255.255.0.0\n"
    assert parse_ip(vnic).ip == "192.168.5.3" and parse_link(vnic) == "UP"


def test_link_net_health_netdetect_gateway_from_mindie_doc():
    doc = load(MINDIE)
    assert parse_link("link status: UP") == "UP" and parse_link("link status: DOWN") == "DOWN"
    assert parse_link("") is None
    line = next(l for l in doc.splitlines() if l.startswith("net health status"))
    assert parse_net_health(line) == "Success"
    nd = next(l for l in doc.splitlines() if l.startswith("netdetect address"))
    assert parse_netdetect(nd) == "11.12.165.1"
    gws = [parse_gateway(l) for l in doc.splitlines() if l.startswith("default gateway")]
    assert [(g.address, g.iface) for g in gws] == [("11.12.165.1", f"eth{i}") for i in range(8)]


def test_netdetect_both_spellings_and_empty():
    assert parse_netdetect("netdetect addr: 29.1.0.1") == "29.1.0.1"      # source format string
    assert parse_netdetect("netdetect address: 11.12.165.1") == "11.12.165.1"   # MindIE doc
    assert parse_netdetect("netdetect addr: ") is None


def test_old_socket_failed_net_health():
    text = load("faultdiag_npu_info_before_910A.txt")
    out = per_command(text, "-net_health -g")[0]
    assert parse_net_health(out) == "Socket failed"


@pytest.mark.parametrize("status", ["Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded",
                                    "Fault", "Init", "Thread error", "Detect ip set", "Unknown"])
def test_every_net_health_value_of_the_source_map(status):
    assert parse_net_health(f"net health status: {status}\n") == status


def test_tls_lines_grep_switch():
    doc = load(MINDIE)
    lines = [l for l in doc.splitlines() if "tls switch" in l]
    states = [parse_tls(l) for l in lines]
    assert [(s.dev_id, s.enabled, s.preconfigured, s.alarm_threshold_days) for s in states] == [
        (i, False, True, 60) for i in range(8)]
    enabled = parse_tls(lines[3].replace("tls switch[0]", "tls switch[1]") + "\ncert subject: ...\n")
    assert enabled.enabled is True and enabled.dev_id == 3
    assert parse_tls("Cmd executed successfully!") is None


def test_mtu_and_speed_source_formats():
    assert parse_mtu("mtu:9000\n") == 9000 and parse_mtu("mtu:1500") == 1500 and parse_mtu("") is None
    assert parse_speed("Speed: 100000 Mb/s") == 100000 and parse_speed("Speed: Unknown!") is None


def test_lldp_blog_capture():
    text = load("hccn_tool_lldp.txt")
    assert parse_lldp_ifname(text) == "400GE1/1/20:2"
    assert parse_lldp_max_frame(text) == 9216
    doc = load(MINDIE)
    assert [parse_lldp_ifname(l) for l in doc.splitlines() if "Ifname:" in l][:2] == ["400GE1/1/5:1", "400GE1/1/5:2"]


def test_optical_910a_capture():
    opt = parse_optical(load("hccn_tool_optical_910A.txt"))
    assert opt.present == "not present" and opt.temperature_c == 47.0
    assert opt.get("vendor name") == "Hisense" and opt.get("Rx Los Flag") == "0xff"
    assert opt.get("Host SNR Lane0") == "not supported" and opt.get("Media SNR Lane3") == "23.2969 dB"
    assert parse_optical("") is None


def test_link_stat_devid_and_device_forms():
    text = load("hccn_tool_link_stat.txt")
    outs = per_command(text, "-link_stat -g")
    first = parse_link_stat(outs[0])
    assert (first.dev_id, first.current_time, first.link_up_count) == (0, "Wed Aug  2 03:36:43 2022", 2)
    assert [r.state for r in first.records] == ["LINK DOWN", "LINK UP", "LINK DOWN", "LINK UP"]
    assert first.records[0].when == "Tue Aug  1 14:44:40 2022"
    doc = parse_link_stat(text[text.index("[device 0]current"):text.index("# --- current 910B")])
    assert (doc.dev_id, doc.link_up_count, len(doc.records)) == (0, 2, 3)
    assert doc.records[0].state == "LINK UP" and doc.link_down_count is None
    newer = parse_link_stat("[devid 3]current time        : Mon Jan  5 10:00:00 2026\n"
                            "[devid 3]link up count       : 4\n[devid 3]link down count     : 3\n"
                            "[devid 3]link change records : NA\n")
    assert (newer.dev_id, newer.link_up_count, newer.link_down_count, newer.records) == (3, 4, 3, ())


def test_ping_captures():
    blog = parse_ping(load("hccn_tool_ping.txt"))
    assert (blog.device, blog.target, blog.transmitted, blog.received, blog.loss_pct) == (3, "29.1.137.205", 3, 3, 0.0)
    assert blog.rtts_ms == (1.418, 0.034, 0.04) and blog.ok
    doc = load(MINDIE)
    pings = doc[doc.index("device 0 PING"):doc.index("$ for i in {0..7}; do hccn_tool -i $i -lldp")]
    blocks = ["device " + b for b in pings.split("device ")[1:]]
    parsed = [parse_ping(b) for b in blocks]
    assert [p.device for p in parsed] == list(range(8)) and all(p.ok for p in parsed)
    assert parsed[7].rtts_ms[0] == 0.157


def test_ping_failure_and_new_source_format():
    failed = parse_ping("device 0 PING 11.12.165.90\nrecv time out seq=0\nrecv time out seq=1\n"
                        "recv time out seq=2\n3 packets transmitted, 0 received, 100.00% packet loss\n")
    assert not failed.ok and failed.timeouts == 3 and failed.received == 0 and failed.loss_pct == 100.0
    new = parse_ping("device 2 PING 10.0.0.3\nrecv seq 0, time = 12.500us, L1 plane check result = 0x0\n"
                     "1 packets transmitted, 1 received, 0.00% packets loss")
    assert new.ok and new.rtts_ms == (0.0125,)
    assert parse_ping("") is None


def test_hccn_conf_blog():
    conf = parse_hccn_conf(load("hccn_conf_arthurchiao.txt"))
    assert conf.devices() == (0, 7)
    assert conf.addresses() == {0: "29.1.137.205", 7: "29.1.170.143"}
    assert conf.get(0, "netmask") == "255.255.0.0" and conf.get(7, "netdetect") == "29.1.0.1"
    assert conf.get(0, "send_arp_status") == "1" and conf.get(3, "address") is None


def test_faultdiag_8dev_capture_ips_and_link_stats():
    text = load("faultdiag_npu_info_after_8dev.txt")
    ips = [parse_ip(o).ip for o in per_command(text, "-ip -g")]
    assert ips == [f"10.10.0.{10 + i}" for i in range(8)]
    stats = [parse_link_stat(o) for o in per_command(text, "-link_stat -g")]
    assert [s.dev_id for s in stats] == list(range(8))
    assert [len(s.records) for s in stats] == [4, 3, 3, 4, 3, 3, 3, 3]
    assert stats[3].records[0].state == "LINK DOWN" and stats[7].current_time == "Wed Aug  2 03:36:45 2022"


def test_status_capture_speed_without_space():
    assert parse_speed(load("hccn_tool_status.txt")) == 200000
