"""Table-driven: each fault kind shows through the real commands as on real hardware, and
`lab heal` brings the node back to what it was."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from ascendctl.errors import InputError
from ascendctl_lab.faults import FAULT_KINDS
from ascendctl_runtime.faults.link import parse_link, parse_link_stat
from ascendctl_runtime.faults.logcodes import scan_log
from ascendctl_runtime.faults.npu_ecc import parse_ecc
from ascendctl_runtime.faults.npu_health import parse_health
from ascendctl_runtime.faults.npu_temp import parse_temperature

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


def run(lab, node, command):
    proc = lab.exec(node, command, check=False, timeout=120)
    return proc.stdout + proc.stderr


def ecc_counts(out):
    reading = parse_ecc(out)
    return (reading.single_bit, reading.single_bit_total, reading.multi_bit,
            reading.multi_bit_total)


def health_of(out):
    """The health reading after the main table's NPU row (first line of OUT)."""
    return parse_health(out.split("\n", 1)[1])


PLOG = "/root/ascend/log/debug/plog"


def ssh_rc(lab, node):
    return subprocess.run(lab.ssh_argv(node, "true"), capture_output=True, timeout=60).returncode


# kind -> (value, command on node0, predicate on the output when faulty, when healthy)
CASES = {
    "firmware-incompatible": (None, "grep ^Version= /usr/local/Ascend/firmware/version.info; "
                              "npu-smi info -t board -i 0 | grep Firmware",
                              lambda o: "Version=6.4.0.4.220" in o and ": 6.4.0.4.220" in o,
                              lambda o: "Version=7.8.0.2.212" in o),
    "cann-incompatible": (None, "cat /usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/"
                          "ascend_toolkit_install.info",
                          lambda o: "version=8.0.RC1" in o and "[V100R001C23]" not in o,
                          lambda o: "version=8.5.1" in o and "[V100R001C23]" in o),
    "driver-old": (None, "grep -E '^(Version|Innerversion)=' /usr/local/Ascend/driver/version.info; "
                   "npu-smi info | head -3",
                   lambda o: "Version=24.1.rc2" in o and "C17SPC001" in o and "24.1.rc2" in o.split("\n", 2)[2],
                   lambda o: "Version=25.3.rc1" in o),
    "cann-missing": (None, "ls -d /usr/local/Ascend/ascend-toolkit/latest 2>&1; true",
                     lambda o: "No such file or directory" in o,
                     lambda o: o.strip() == "/usr/local/Ascend/ascend-toolkit/latest"),
    "driver-not-loaded": (None, "npu-smi info; echo rc=$?",
                          lambda o: o == "dcmi module initialize failed. ret is -8005\nrc=1\n",
                          lambda o: "rc=0" in o and "910B3" in o),
    "npu-unhealthy": ("2", "npu-smi info | grep '^| 2 '; npu-smi info -t health -i 2",
                      lambda o: "| Alarm " in o and "A4025021 8C03A000 8C084E00" in o,
                      lambda o: "| OK " in o and "Error Code                     : NA" in o),
    "chip-alarm": ("3", "npu-smi info | grep '^| 3 '; npu-smi info -t health -i 3 -c 0",
                   lambda o: "| Alarm " in o and health_of(o).status == "Alarm"
                   and health_of(o).codes == ("80E01801",),
                   lambda o: "| OK " in o and health_of(o).healthy),
    "ecc-singlebit": ("4", "npu-smi info -t ecc -i 4 -c 0",
                      lambda o: ecc_counts(o) == (1, 1, 0, 0),
                      lambda o: ecc_counts(o) == (0, 0, 0, 0)),
    "ecc-multibit": ("4", "npu-smi info -t ecc -i 4 -c 0",
                     lambda o: ecc_counts(o) == (0, 0, 1, 1),
                     lambda o: ecc_counts(o) == (0, 0, 0, 0)),
    "temp-spike": ("2", "npu-smi info -t temp -i 2 -c 0",
                   lambda o: parse_temperature(o).chip_c == 105,
                   lambda o: parse_temperature(o).chip_c < 60),
    "roce-flap": ("6", None, None, None),
    "plog-error": (None, f"cd {PLOG} 2>/dev/null && grep -H '' -- plog-*.log; true",
                   lambda o: re.fullmatch(r"plog-\d+_\d{17}\.log:\[ERROR\] HCCL\(\d+,python\):"
                                          r"\S+ Execution_Error_ROCE_CQE\(EI0013\): .*\n", o)
                   and [c.code for c in scan_log(o)] == ["EI0013"],
                   lambda o: "EI0013" not in o),
    "engine-hang": (None, None, None, None),
    "npu-missing": ("6", "npu-smi info -l | head -1; ls /dev | grep -c '^davinci[0-9]'; "
                    "lspci -d 19e5:d802 | wc -l; hccn_tool -i 7 -link -g",
                    lambda o: o.split()[:6] == ["Total", "Count", ":", "6", "6", "6"]
                    and "Invalid device id" in o,
                    lambda o: o.split()[:6] == ["Total", "Count", ":", "8", "8", "8"]),
    "hbm-leftover": ("1", "npu-smi info",
                     lambda o: "/usr/bin/python" in o and "| 59017 " in o and "/ 65536" in o,
                     lambda o: "No running processes found in NPU 1 " in o),
    "roce-link-down": ("5", "hccn_tool -i 5 -link -g; ip -br link show eth5",
                       lambda o: o.startswith("link status: DOWN") and " DOWN " in o,
                       lambda o: o.startswith("link status: UP")),
    "mtu-mismatch": ("1500", "hccn_tool -i 0 -mtu -g; cat /sys/class/net/eth7/mtu",
                     lambda o: o.split() == ["mtu:1500", "1500"],
                     lambda o: o.split() == ["mtu:4200", "4200"]),
    "device-ip-missing": ("4", "hccn_tool -i 4 -ip -g; grep -c '^address_4=' /etc/hccn.conf",
                          lambda o: o.strip() == "0",
                          lambda o: o.startswith("ipaddr:198.19.")),
    "device-ip-duplicate": ("0", "hccn_tool -i 0 -ip -g", None, None),
    "tls-mismatch": (None, "hccn_tool -i 3 -tls -g",
                     lambda o: "tls switch[1]" in o, lambda o: "tls switch[0]" in o),
    "net-health-fail": ("2", "hccn_tool -i 2 -net_health -g",
                        lambda o: o == "net health status: Receive timeout\n",
                        lambda o: o == "net health status: Success\n"),
    "netdetect-missing": ("2", "hccn_tool -i 2 -net_health -g; hccn_tool -i 2 -netdetect -g",
                          lambda o: o.startswith("net health status: Init"),
                          lambda o: o.startswith("net health status: Success")),
    "disk-small": ("64M", "df -P -k /var/lib/ascendctl | tail -1",
                   lambda o: o.split()[1] == "65536" and o.split()[5] == "/var/lib/ascendctl",
                   lambda o: o.split()[5] == "/"),
    "sshd-down": (None, "systemctl is-active ssh.service; true",
                  lambda o: o.strip() == "inactive", lambda o: o.strip() == "active"),
    "power-off": (None, None, None, None),
    "clock-skew": ("3600", "date +%s; python3 -c 'import time; print(int(time.time()))'",
                   lambda o: all(abs(int(t) - time.time() - 3600) < 60 for t in o.split()),
                   lambda o: all(abs(int(t) - time.time()) < 60 for t in o.split())),
    "bios-sriov-on": (None, "lspci -vvv -d 19e5:d802 | grep -E 'IOVCtl|Number of VFs'",
                      lambda o: o.count("Enable+") == 8 and o.count("Number of VFs: 16") == 8,
                      lambda o: o.count("Enable-") == 8 and o.count("Number of VFs: 0") == 8),
    "bios-acs-on": (None, "lspci -vvv | grep ACSCtl",
                    lambda o: o.count("SrcValid+ TransBlk- ReqRedir+ CmpltRedir+") == 8,
                    lambda o: o.count("SrcValid- TransBlk- ReqRedir- CmpltRedir-") == 8),
    "bios-above4g-off": (None, "lspci -v -d 19e5:d802 | grep Region",
                         lambda o: o.count("<unassigned>") == 24,
                         lambda o: "<unassigned>" not in o and o.count("Memory at 2") == 24),
}


def check_roce_flap(lab, node0, node1, port):
    def stat():
        return parse_link_stat(run(lab, node0.name, f"hccn_tool -i {port} -link_stat -g"))

    before = stat()
    assert parse_link(run(lab, node0.name, f"hccn_tool -i {port} -link -g")).up
    lab.fault(node0.name, "roce-flap", str(port))
    seen_down = False
    changes = []
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and (not seen_down or len(set(changes)) < 4):
        seen_down |= not parse_link(run(lab, node0.name, f"hccn_tool -i {port} -link -g")).up
        changes.append(stat().changes)
        time.sleep(1)
    assert seen_down
    # a monitor reading now and then sees the counter climb, several times
    assert len(set(changes)) >= 4 and changes == sorted(changes), changes
    during = stat()
    assert during.down_count >= before.down_count + 3
    assert during.up_count >= before.up_count + 2
    assert [r.up for r in during.records[:4]] in ([True, False, True, False],
                                                  [False, True, False, True])
    lab.heal(node0.name)
    assert run(lab, node0.name, f"systemctl is-active ascend-roce-flap{port}").strip() != "active"
    after = stat()
    assert parse_link(run(lab, node0.name, f"hccn_tool -i {port} -link -g")).up
    assert after.records[0].up and after.down_count >= during.down_count
    time.sleep(6)
    assert stat().down_count == after.down_count          # no more flaps
    # the port is usable again: its device IP answers over the RoCE network
    ping = f"ping -c1 -W2 -I {node1.device_ips[port]} {node0.device_ips[port]} >/dev/null; echo $?"
    assert run(lab, node1.name, ping).strip() == "0"


def test_every_kind_has_a_case():
    assert set(CASES) == set(FAULT_KINDS)


@pytest.mark.parametrize("kind", list(FAULT_KINDS))
def test_fault_is_visible_and_heal_restores(lab, kind):
    value, command, faulty, healthy = CASES[kind]
    node0, node1 = lab.nodes[0], lab.nodes[1]
    try:
        if kind == "power-off":
            lab.fault(node1.name, kind)
            assert not lab.node(node1.name).running
            assert subprocess.run(["ping", "-c", "1", "-W", "1", node1.mgmt_ip],
                                  capture_output=True).returncode != 0
            assert ssh_rc(lab, node1.name) == 255
            lab.heal(node1.name)
            assert ssh_rc(lab, node1.name) == 0
            assert run(lab, node1.name, "systemctl is-system-running").strip() == "running"
            return
        if kind == "roce-flap":
            check_roce_flap(lab, node0, node1, int(value))
            return
        if kind == "engine-hang":
            # The shared lab runs no engine: refused, naming the unit (the hang itself is
            # tested with an engine in the engine suite).
            with pytest.raises(InputError, match="ascendctl-engine.service is not running"):
                lab.fault(node0.name, kind)
            return
        if kind == "device-ip-duplicate":
            lab.fault(node0.name, kind, value)
            out = run(lab, node0.name, command)
            assert out.startswith(f"ipaddr:{node1.device_ips[0]}\n")
            assert run(lab, node1.name, "hccn_tool -i 0 -ip -g").startswith(
                f"ipaddr:{node1.device_ips[0]}\n")
            lab.heal(node0.name)
            assert run(lab, node0.name, command).startswith(f"ipaddr:{node0.device_ips[0]}\n")
            return
        assert healthy(run(lab, node0.name, command)), run(lab, node0.name, command)
        lab.fault(node0.name, kind, value)
        out = run(lab, node0.name, command)
        assert faulty(out), out
        if kind == "sshd-down":
            assert ssh_rc(lab, node0.name) == 255
        if kind in ("ecc-singlebit", "ecc-multibit"):
            lab.fault(node0.name, kind, value)          # repeated injection keeps adding
            counts = ecc_counts(run(lab, node0.name, command))
            assert counts in ((2, 2, 0, 0), (0, 0, 2, 2)), counts
            assert ecc_counts(run(lab, node0.name, "npu-smi info -t ecc -i 5 -c 0")) == (0, 0, 0, 0)
        if kind == "temp-spike":
            # one spiked read only; the main table shows a pending spike
            assert healthy(run(lab, node0.name, command))
            lab.fault(node0.name, kind, value)
            row = run(lab, node0.name, "npu-smi info | grep '^| 2 '")
            assert row.split("|")[3].split()[1] == "105", row
            assert faulty(run(lab, node0.name, command))
            assert healthy(run(lab, node0.name, command))
            lab.fault(node0.name, kind, value)          # heal drops a pending spike
        if kind == "plog-error":
            lab.fault(node0.name, kind)
            assert run(lab, node0.name, f"ls {PLOG} | wc -l").strip() == "2"
        if kind == "roce-link-down":
            # Port 5's device IP is unreachable; port 4's still answers.
            down = run(lab, node1.name, f"ping -c1 -W1 -I {node1.device_ips[5]} "
                                        f"{node0.device_ips[5]} >/dev/null; echo $?")
            up = run(lab, node1.name, f"ping -c1 -W1 -I {node1.device_ips[4]} "
                                      f"{node0.device_ips[4]} >/dev/null; echo $?")
            assert (down.strip(), up.strip()) == ("1", "0")
            assert "LINK DOWN" in run(lab, node0.name, "hccn_tool -i 5 -link_stat -g")
        if kind == "mtu-mismatch":
            big = f"ping -c1 -W1 -M do -s 4000 -I {node1.device_ips[0]} {node0.device_ips[0]}"
            assert run(lab, node1.name, big + " >/dev/null; echo $?").strip() != "0"
        if kind == "hbm-leftover":
            pid = int(out.split("| 1       0                 | ")[1].split()[0])
            assert run(lab, node0.name, f"cat /proc/{pid}/cmdline").startswith("/usr/bin/python3")
        if kind == "disk-small":
            assert "No space left" in run(
                lab, node0.name, "head -c 100M /dev/zero > /var/lib/ascendctl/big; rm -f "
                                 "/var/lib/ascendctl/big")
        lab.heal(node0.name)
        out = run(lab, node0.name, command)
        assert healthy(out), out
        if kind == "sshd-down":
            assert ssh_rc(lab, node0.name) == 0
    finally:
        lab.heal()
