"""Host fact parsers, held against the real tools on this machine where they exist."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from ascendctl.facts.system import _PY_PACKAGES
from ascendctl.facts.system import (
    ClockSample,
    FactParseError,
    parse_df,
    parse_epoch,
    parse_getent_ahosts,
    parse_ip_json,
    parse_linux_ping,
    parse_lscpu_json,
    parse_nic_speeds,
    parse_node_name,
    parse_numa_sysfs,
    parse_os_release,
    parse_port_probes,
    parse_python_packages,
    parse_ss_listen,
)


def run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_ip_json_live_matches_sysfs():
    assert shutil.which("ip"), "iproute2 not installed: scripts/bootstrap installs it"
    ifaces = parse_ip_json(run("ip", "-j", "addr", "show"))
    assert {i.name for i in ifaces} == set(os.listdir("/sys/class/net"))
    lo = next(i for i in ifaces if i.name == "lo")
    assert lo.is_loopback and lo.has_address("127.0.0.1") and lo.mtu == 65536
    assert any(a.is_loopback for a in lo.addresses)


def test_ip_json_states():
    data = [{"ifindex": 3, "ifname": "eth1", "flags": ["BROADCAST", "MULTICAST", "UP"], "mtu": 9000,
             "operstate": "DOWN", "link_type": "ether", "address": "aa:bb:cc:dd:ee:ff",
             "addr_info": [{"family": "inet", "local": "10.0.0.5", "prefixlen": 24}]},
            {"ifindex": 4, "ifname": "veth0", "flags": ["BROADCAST", "UP", "LOWER_UP"], "mtu": 1500,
             "operstate": "UP", "link_type": "ether", "addr_info": []}]
    eth1, veth0 = parse_ip_json(json.dumps(data))
    assert not eth1.is_up and eth1.mtu == 9000 and eth1.has_address("10.0.0.5")
    assert veth0.is_up and veth0.addresses == ()
    with pytest.raises(FactParseError):
        parse_ip_json("Object \"addr\" is unknown")


def test_nic_speeds():
    assert parse_nic_speeds("eth0 1000\neth1 100000\nlo -1\n") == {"eth0": 1000, "eth1": 100000}


def test_df_live_matches_statvfs(tmp_path):
    disk = parse_df(run("df", "-P", "-T", "-B1", str(tmp_path)), str(tmp_path))
    st = os.statvfs(tmp_path)
    assert disk.total_bytes == st.f_blocks * st.f_frsize
    assert abs(disk.available_bytes - st.f_bavail * st.f_frsize) < 64 << 20   # other writers in between
    assert disk.fs_type and disk.mount_point.startswith("/")
    plain = parse_df(run("df", "-P", "-B1", str(tmp_path)), str(tmp_path))
    assert plain.fs_type is None and plain.total_bytes == disk.total_bytes


def test_df_network_filesystems():
    nfs = parse_df("Filesystem Type 1-blocks Used Available Capacity Mounted on\n"
                   "10.0.0.2:/export/models nfs4 1000 400 600 40% /mnt/models\n", "/mnt/models/q")
    assert nfs.is_network and nfs.available_bytes == 600
    with pytest.raises(FactParseError):
        parse_df("df: /nope: No such file or directory\n")


def test_ss_live_sees_a_listening_socket():
    assert shutil.which("ss"), "ss not installed: scripts/bootstrap installs it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        listening = parse_ss_listen(run("ss", "-Hltnp"))
    mine = [x for x in listening if x.port == port]
    assert mine and mine[0].address == "127.0.0.1"
    comm = open("/proc/self/comm").read().strip()
    assert mine[0].process in (None, comm)       # named only when ss may read our /proc


def test_ss_formats():
    socks = parse_ss_listen('LISTEN 0      4096   [::]:8000   [::]:*   users:(("vllm",pid=4242,fd=12))\n'
                            "LISTEN 0      128    0.0.0.0:22    0.0.0.0:*\n")
    assert [(s.address, s.port, s.process) for s in socks] == [("::", 8000, "vllm"), ("0.0.0.0", 22, None)]


def test_lscpu_live_and_sysfs_agree():
    assert shutil.which("lscpu"), "lscpu not installed: scripts/bootstrap installs it"
    topo = parse_lscpu_json(run("lscpu", "-J"))
    assert len(topo.online_cpus) == os.cpu_count()
    if os.path.isdir("/sys/devices/system/node/node0"):
        lines = "".join(f"{n} {open(f'/sys/devices/system/node/{n}/cpulist').read().strip()}\n"
                        for n in sorted(os.listdir("/sys/devices/system/node")) if n[4:].isdigit())
        sysfs = parse_numa_sysfs(lines)
        assert sysfs.nodes == topo.nodes


def test_numa_sysfs_two_sockets():
    topo = parse_numa_sysfs("node0 0-23,48-71\nnode1 24-47,72-95\n")
    assert topo.node_of_cpu(50) == 0 and topo.node_of_cpu(30) == 1 and len(topo.online_cpus) == 96
    with pytest.raises(FactParseError):
        parse_numa_sysfs("")


def test_python_packages_snippet_live():
    env = parse_python_packages(run(sys.executable, "-c", _PY_PACKAGES))
    assert env.python_version == "%d.%d.%d" % sys.version_info[:3]
    assert env.executable == sys.executable
    # this venv has none of the serving packages: they are reported missing, not crashed on
    assert env.version_of("torch_npu") is None and env.version_of("vllm-ascend") is None


def test_python_packages_aliases():
    env = parse_python_packages("python=3.11.9\nexecutable=/opt/v/bin/python\npkg:torch_npu=\n"
                                "pkg:torch-npu=2.9.0.post1\npkg:vllm=0.32.0+cpu\npkg:vllm-ascend=\n")
    assert env.version_of("torch-npu") == "2.9.0.post1" and env.version_of("torch_npu") == "2.9.0.post1"
    assert env.version_of("vllm") == "0.32.0+cpu" and env.version_of("vllm_ascend") is None
    with pytest.raises(FactParseError):
        parse_python_packages("Traceback (most recent call last):\n")


def test_clock_ntp_style_offset():
    # node clock 5 s ahead; the script ran 1.0 s of a 1.2 s round trip
    c = ClockSample(node_start=1005.1, node_end=1006.1, sent_at=1000.0, received_at=1001.2)
    assert c.offset_s == pytest.approx(5.0) and c.uncertainty_s == pytest.approx(0.1)
    assert ClockSample(1.0, 2.0).offset_s is None
    assert parse_epoch(run("date", "+%s.%N")) == pytest.approx(__import__("time").time(), abs=5)


def test_probe_lines_and_linux_ping():
    probes = parse_port_probes("198.18.0.11 8000 refused\n198.18.0.11 13389 timeout\n")
    assert [p.reachable for p in probes] == [True, False]
    ok = parse_linux_ping("PING 10.0.0.2 (10.0.0.2) from 10.0.0.1 : 8972(9000) bytes of data.\n"
                          "8980 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms\n\n"
                          "--- 10.0.0.2 ping statistics ---\n2 packets transmitted, 2 received, 0% packet loss, time 1ms\n")
    assert ok.ok and ok.frag_needed_mtu is None
    too_big = parse_linux_ping("ping: local error: message too long, mtu=1500\n"
                               "2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 1ms\n")
    assert not too_big.ok and too_big.frag_needed_mtu == 1500


def test_hostname_and_os_release():
    assert parse_node_name("node1\n") == "node1" and parse_node_name("") == ""
    assert parse_getent_ahosts("198.18.0.12   STREAM node1\n198.18.0.12   DGRAM  \n") \
        == ("198.18.0.12",)
    assert parse_getent_ahosts("") == ()
    if os.path.exists("/etc/os-release"):
        osr = parse_os_release(open("/etc/os-release").read(), kernel=os.uname().release)
        assert osr.id and osr.kernel == os.uname().release
