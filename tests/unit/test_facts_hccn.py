"""hccn_tool and /etc/hccn.conf beyond the captures of tests/facts/hccn_*: the source's
whole vocabulary, edited and constructed outputs, and the helpers over parsed values."""

from pathlib import Path

import pytest

from ascendctl.facts.hccn import (
    NET_HEALTH_VALUES,
    parse_hccn_conf,
    parse_net_health,
    parse_ping,
    parse_tls,
)

TESTS = Path(__file__).resolve().parents[1]


def load(name: str) -> str:
    text = (TESTS / "fixtures" / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def case(fact: str, name: str) -> str:
    return (TESTS / "facts" / fact / f"{name}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def test_every_net_health_value_of_the_source_map():
    source = load("hccn_tool_910B_source_format_strings.txt")
    values = [line.split('"')[1] for line in source.splitlines() if line.strip().startswith("{ 0x")]
    assert len(values) == 10 and set(values) <= set(NET_HEALTH_VALUES)
    for status in values:
        assert parse_net_health(f"net health status: {status}\n") == status


def test_tls_enabled_and_certificate_lines_after_the_switch_line():
    line = case("hccn_tls", "mindie_port7").replace("tls switch[0]", "tls switch[1]")
    enabled = parse_tls(line + "\ncert subject: ...\n")
    assert enabled.enabled is True and enabled.dev_id == 7 and enabled.alarm_threshold_days == 60


def test_ping_failure_counts_timeouts():
    failed = parse_ping("device 0 PING 11.12.165.90\nrecv time out seq=0\nrecv time out seq=1\n"
                        "recv time out seq=2\n3 packets transmitted, 0 received, 100.00% packet loss\n")
    assert not failed.ok and failed.timeouts == 3 and failed.received == 0 and failed.loss_pct == 100.0
    assert parse_ping("") is None


@pytest.mark.parametrize("text", ["", "Cmd executed successfully!\n"])
def test_hccn_conf_helpers(text):
    conf = parse_hccn_conf(case("hccn_conf", "arthurchiao") + text)
    assert conf.devices() == (0, 7)
    assert conf.addresses() == {0: "29.1.137.205", 7: "29.1.170.143"}
    assert conf.get(0, "netmask") == "255.255.0.0" and conf.get(7, "netdetect") == "29.1.0.1"
    assert conf.get(3, "address") is None
