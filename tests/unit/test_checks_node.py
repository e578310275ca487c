"""Each check passes on the healthy captured cluster and fails on an edited copy."""

import importlib.util
import json
from pathlib import Path

import pytest

from ascendctl.checks import PinnedVersions, Status, run_checks

_spec = importlib.util.spec_from_file_location(
    "node_outputs", Path(__file__).resolve().parents[1] / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)


def result(outputs, check_id, node="node1", exp=None):
    results = run_checks(no.facts_of(outputs), exp or no.expectations(), only=[check_id])
    return next(r for r in results if r.node == node and r.check_id == check_id)


def healthy():
    return no.cluster_outputs()


def test_every_check_passes_or_skips_on_the_healthy_cluster():
    results = run_checks(no.facts_of(healthy()), no.expectations())
    assert {r.status for r in results} <= {Status.PASS, Status.SKIP}
    assert sum(r.status == Status.PASS for r in results) >= 2 * 35


# --- npu --------------------------------------------------------------------------------

def test_npu_smi_8005_blank_and_missing():
    o = healthy()
    o["node1"]["npu_smi_info"] = ("", "dcmi module initialize failed. ret is -8005\n", 255)
    r = result(o, "npu.smi")
    assert r.status == Status.FAIL and "-8005" in r.message and "reboot" in r.remediation
    o["node1"]["npu_smi_info"] = ""
    assert "no device table" in result(o, "npu.smi").message
    o["node1"]["npu_smi_info"] = ("", "bash: npu-smi: command not found\n", 127)
    r = result(o, "npu.smi")
    assert r.status == Status.FAIL and "unavailable" in r.message
    # everything that needs the table skips instead of piling on
    for cid in ("npu.count", "npu.health", "npu.processes", "npu.hbm_free", "npu.chip"):
        assert result(o, cid).status == Status.SKIP


def test_driver_install_warning():
    o = healthy()
    line = "[WARNING]The driver package may not be completely installed, which may cause function abnormal. Please reinstall it.\n"
    o["node1"]["npu_smi_info"] += line
    r = result(o, "npu.driver_install")
    assert r.status == Status.WARN and "--full" in r.remediation
    o = healthy()
    o["node1"]["install_info"] = "Driver_Install_Status=installing\n"
    assert result(o, "npu.driver_install").status == Status.WARN


def test_first_generation_910_is_refused():
    o = healthy()
    o["node1"]["npu_smi_info"] = no.fixture("npu-smi_info_910A_8npu.txt")
    o["node1"]["npu_smi_board:0"] = no.board_910b().replace("0xD802", "0xD801")
    o["node1"]["lspci"] = o["node1"]["lspci"].replace("[19e5:d802]", "[19e5:d801]")
    r = result(o, "npu.chip")
    assert r.status == Status.FAIL and "first-generation" in r.message


def test_310p_and_wrong_model():
    o = healthy()
    o["node1"]["npu_smi_info"] = no.fixture("npu-smi_info_310P3.txt").split("# same source")[0]
    for key in ("npu_smi_board:0", "npu_smi_board_chip:0:0", "lspci"):
        o["node1"].pop(key)
    r = result(o, "npu.chip")
    assert r.status == Status.FAIL and "310" in r.message
    o = healthy()
    r = result(o, "npu.chip", exp=no.expectations(chip="910B4"))
    assert r.status == Status.FAIL and "910B3" in r.message and "910B4" in r.message
    assert result(healthy(), "npu.chip", exp=no.expectations(chip="910B")).status == Status.PASS


def test_count_lspci_sees_more_than_npu_smi():
    o = healthy()
    r = result(o, "npu.count", exp=no.expectations(npus_per_node=4))
    assert r.status == Status.PASS
    o["node1"]["lspci"] += o["node1"]["lspci"].split("\n\n")[1].replace("0000:c1:00.0", "0000:c3:00.0") + "\n"
    r = result(o, "npu.count")
    assert r.status == Status.FAIL and "lspci shows 9" in r.message


def test_error_codes_on_healthy_npu():
    o = healthy()
    o["node1"]["npu_smi_health:2:0"] = no.health_ok().replace("Error Code                     : NA",
                                                               "Error Code                     : 8C03A000")
    r = result(o, "npu.error_codes")
    assert r.status == Status.WARN and "8C03A000" in r.message
    assert result(o, "npu.health").status == Status.PASS


def test_hbm_used_without_a_visible_process():
    o = healthy()
    o["node1"] = no.edit(o["node1"], "npu_smi_info", "3380 / 65536", "61000/ 65536")   # NPU 1
    r = result(o, "npu.hbm_free")
    assert r.status == Status.FAIL and "NPU 1/0 4536 MB free" in r.message
    assert result(o, "npu.processes").status == Status.PASS
    # a layout needing 62 GB per card does not fit even on idle NPUs
    r = result(healthy(), "npu.hbm_free", exp=no.expectations(min_free_hbm_mb=63000))
    assert r.status == Status.FAIL and "need 63000" in r.message


def test_allowed_pids_are_our_own_engine():
    o = healthy()
    row = "| No running processes found in NPU 0                                                            |"
    o["node1"] = no.edit(o["node1"], "npu_smi_info", row,
                         "| 0       0                 | 842           | /usr/local/pyth          | 59017                   |")
    assert result(o, "npu.processes").remediation.endswith("kill 842")
    assert result(o, "npu.processes", exp=no.expectations(allowed_npu_pids=frozenset({842}))).status == Status.PASS


# --- versions ---------------------------------------------------------------------------

def test_cann_driver_incompatible_pair_from_the_910a_capture():
    o = healthy()
    text = no.fixture("version_info_files_910A_host.txt")
    o["node1"]["version:driver"] = text[text.index("Version=23.0.7"):text.index("cat /usr/local/Ascend/firmware")]
    o["node1"]["version:toolkit"] = text[text.index("package_name=Ascend-cann-toolkit"):text.index("cat /usr/local/Ascend/nnae")]
    r = result(o, "versions.cann_driver")
    assert r.status == Status.FAIL and "V100R001C15" in r.message and "7.0.T10" in r.message
    assert result(healthy(), "versions.cann_driver").status == Status.PASS


def test_python_stack_missing_and_mismatched():
    o = healthy()
    o["node1"] = no.edit(o["node1"], "python", "pkg:torch_npu=2.9.0.post1\npkg:torch-npu=2.9.0.post1\n",
                         "pkg:torch_npu=\npkg:torch-npu=\n")
    r = result(o, "versions.python_stack")
    assert r.status == Status.FAIL and r.message == "not installed: torch-npu"
    assert r.remediation.startswith("/opt/vllm/bin/python -m pip install torch-npu")
    o = healthy()
    o["node1"] = no.edit(o["node1"], "python", "pkg:torch_npu=2.9.0.post1", "pkg:torch_npu=2.9.0")
    o["node1"] = no.edit(o["node1"], "python", "pkg:torch-npu=2.9.0.post1", "pkg:torch-npu=2.9.0")
    r = result(o, "versions.python_stack")
    assert r.status == Status.FAIL and "torch-npu 2.9.0 (needs 2.9.0.post1)" in r.message
    assert "torch-npu==2.9.0.post1" in r.remediation
    o = healthy()
    o["node1"] = no.edit(o["node1"], "version:toolkit", "version=8.5.1", "version=8.2.RC1")
    r = result(o, "versions.python_stack")
    assert r.status == Status.FAIL and "CANN 8.2.RC1 (needs 8.5.1)" in r.message


def test_python_stack_unknown_release_and_lab_cpu_stack():
    o = healthy()
    o["node1"]["python"] = no.python_packages("0.99.0")
    assert result(o, "versions.python_stack").status == Status.WARN
    lab = healthy()
    lab["node1"]["python"] = "python=3.11.2\nexecutable=/opt/vllm/bin/python\npkg:vllm=0.32.0+cpu\n"
    exp = no.expectations(required_packages=("vllm",), versions=PinnedVersions())
    assert result(lab, "versions.python_stack", exp=exp).status == Status.PASS
    assert result(lab, "versions.python", exp=exp).status == Status.PASS


def test_python_version_outside_the_release():
    o = healthy()
    o["node1"] = no.edit(o["node1"], "python", "python=3.11.9", "python=3.12.4")
    r = result(o, "versions.python")
    assert r.status == Status.FAIL and "3.10-3.11" in r.message


def test_pins():
    o = healthy()
    exp = no.expectations(versions=PinnedVersions(driver="25.3", firmware="7.8.0.2.212", cann="8.5.1",
                                                  torch_npu="2.9.0.post1", vllm="0.18.0", python="3.11"))
    assert result(o, "versions.pinned", exp=exp).status == Status.PASS     # 25.3 pins the series
    exp = no.expectations(versions=PinnedVersions(vllm="0.17.0"))
    r = result(o, "versions.pinned", exp=exp)
    assert r.status == Status.FAIL and "vllm 0.18.0+empty (pinned 0.17.0)" in r.message
    assert r.remediation == "/opt/vllm/bin/python -m pip install vllm==0.17.0"


def test_uniform_for_unpinned_components():
    o = no.cluster_outputs(3)
    o["node2"] = no.edit(o["node2"], "python", "pkg:torch=2.9.0", "pkg:torch=2.9.1")
    results = run_checks(no.facts_of(o), no.expectations(3), only=["versions.uniform"])
    by = {r.node: r for r in results}
    assert by["node2"].status == Status.FAIL and "torch 2.9.1 (cluster: 2.9.0)" in by["node2"].message
    assert by["node0"].status == by["node1"].status == Status.PASS


# --- roce -------------------------------------------------------------------------------

def test_netmask_and_gateway():
    o = healthy()
    o["node1"] = no.edit(o["node1"], "hccn:ip:4", "netmask:255.255.255.0", "netmask:255.255.0.0")
    r = result(o, "roce.netmask")
    assert r.status == Status.FAIL and r.remediation == "hccn_tool -i 4 -ip -s address 11.12.165.94 netmask 255.255.255.0"
    o = healthy()
    o["node1"]["hccn:gateway:6"] = ""
    r = result(o, "roce.gateway")
    assert r.status == Status.WARN and "hccn_tool -i 6 -gateway -s gateway" in r.remediation


def test_ip_typed_wrong_against_inventory():
    o = healthy()
    o["node1"] = no.edit(o["node1"], "hccn:ip:5", "11.12.165.95", "11.12.165.59")
    r = result(o, "roce.ip.inventory")
    assert r.status == Status.FAIL and "device 5 has 11.12.165.59, inventory says 11.12.165.95" in r.message
    assert r.remediation.startswith("hccn_tool -i 5 -ip -s address 11.12.165.95 netmask 255.255.255.0")


def test_ping_fails_between_healthy_ports():
    o = healthy()
    o["node1"]["ping:4:11.12.165.84"] = no.ping_fail(4, "11.12.165.84")
    r = result(o, "roce.ping")
    assert r.status == Status.FAIL and "device 4 -> 11.12.165.84" in r.message
    assert r.remediation.startswith("hccn_tool -i 4 -ping -g address 11.12.165.84")
    assert result(o, "roce.ping", node="node0").status == Status.PASS


def _dfping(o, node, dev, ip, ok=True, mtu_err=None):
    if ok:
        o[node][f"dfping:{dev}:{ip}"] = "2 packets transmitted, 2 received, 0% packet loss, time 1ms\n"
    elif mtu_err:
        o[node][f"dfping:{dev}:{ip}"] = (f"ping: local error: message too long, mtu={mtu_err}\n"
                                         "2 packets transmitted, 0 received, +2 errors, 100% packet loss\n", 1)
    else:
        o[node][f"dfping:{dev}:{ip}"] = ("2 packets transmitted, 0 received, 100% packet loss, time 1ms\n", 1)


def test_path_mtu_switch_vs_port():
    o = healthy()
    for dev in range(8):
        _dfping(o, "node0", dev, no.device_ips(1)[dev])
        _dfping(o, "node1", dev, no.device_ips(0)[dev])
    exp = no.expectations(path_mtu=9000)
    assert result(o, "roce.path_mtu", exp=exp).status == Status.PASS
    _dfping(o, "node1", 6, no.device_ips(0)[6], ok=False)       # both ports 9000: a hop in between
    r = result(o, "roce.path_mtu", exp=exp)
    assert r.status == Status.FAIL and "device 6 -> 11.12.165.86" in r.message
    o = healthy()
    for dev in range(8):
        _dfping(o, "node0", dev, no.device_ips(1)[dev], ok=dev != 3)
        _dfping(o, "node1", dev, no.device_ips(0)[dev], ok=dev != 3, mtu_err=1500 if dev == 3 else None)
    o["node1"] = no.edit(o["node1"], "hccn:mtu:3", "mtu:9000", "mtu:1500")
    assert result(o, "roce.path_mtu", exp=exp).status == Status.PASS       # roce.mtu names it
    assert result(o, "roce.mtu", exp=exp).status == Status.FAIL
    o = healthy()
    o["node1"]["dfping:0:11.12.165.80"] = ("unsupported: device IP is not a host interface\n", 3)
    assert result(o, "roce.path_mtu", exp=exp).status == Status.SKIP


# --- pcie / host / network / launch -----------------------------------------------------

def test_pcie_without_lspci_warns():
    o = healthy()
    o["node1"]["lspci"] = ("", "bash: lspci: command not found\n", 127)
    for cid in ("pcie.sriov", "pcie.acs", "pcie.above4g"):
        r = result(o, cid)
        assert r.status == Status.WARN and "pciutils" in r.remediation


def test_numa_affinity_names_offline_cpus():
    o = healthy()
    o["node1"]["numa_sysfs"] = "node0 0-95\n"          # a 96-CPU host: 144-167 do not exist
    r = result(o, "host.numa")
    assert r.status == Status.WARN and "NPU 0: affinity CPUs 144-167 are not online" in r.message


def test_model_on_nfs():
    o = healthy()
    o["node1"]["df"] = ("path=/mnt/models\nFilesystem Type 1-blocks Used Available Capacity Mounted on\n"
                        "10.0.0.2:/export nfs4 10000000000000 1000 9000000000000 1% /mnt/models\n")
    r = result(o, "host.model_storage")
    assert r.status == Status.WARN and "nfs4" in r.message
    assert result(o, "host.disk").status == Status.PASS


def test_port_in_use_on_the_head():
    o = healthy()
    o["node0"]["ss"] += 'LISTEN 0      4096   0.0.0.0:8000   0.0.0.0:*   users:(("python3",pid=777,fd=5))\n'
    r = result(o, "host.ports", node="node0")
    assert r.status == Status.FAIL and "8000 (python3" in r.message and "sport = :8000" in r.remediation
    exp = no.expectations(allowed_port_owners=("python3",))
    assert result(o, "host.ports", node="node0", exp=exp).status == Status.PASS


def test_hostname_not_resolving():
    o = healthy()
    o["node1"]["getent"] = ("", 2)
    r = result(o, "host.hostname")
    assert r.status == Status.WARN and r.remediation == "echo '198.18.0.12 node1' >> /etc/hosts"


@pytest.mark.parametrize("override,needle", [
    (dict(socket_ifname="lo", socket_ip=None), "loopback"),
    (dict(socket_ifname="enp125s0f0", socket_ip=None), "1000 Mb/s"),
    (dict(socket_ifname="enp125s0f0", socket_ip="198.18.0.12"), "does not carry 198.18.0.12"),
    (dict(socket_ifname="eth9", socket_ip="198.18.0.12"), "does not exist"),
    (dict(socket_ifname=None, socket_ip="198.18.9.9"), "no NIC carries"),
])
def test_socket_nic_faults(override, needle):
    from dataclasses import replace
    exp = no.expectations()
    nodes = dict(exp.nodes)
    nodes["node1"] = replace(nodes["node1"], **override)
    r = result(healthy(), "net.socket_nic", exp=replace(exp, nodes=nodes))
    assert r.status == Status.FAIL and needle in r.message, r.message
    if "does not carry" in needle:
        assert r.remediation == "set HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME/TP_SOCKET_IFNAME=enp189s0f0"


def test_nic_down():
    o = healthy()
    data = json.loads(o["node1"]["ip_addr"])
    data[2]["operstate"] = "DOWN"
    data[2]["flags"] = ["BROADCAST", "MULTICAST", "UP"]
    o["node1"]["ip_addr"] = json.dumps(data)
    r = result(o, "net.socket_nic")
    assert r.status == Status.FAIL and "DOWN" in r.message


def test_dp_ranks_overlap_and_headless():
    from dataclasses import replace
    exp = no.expectations(3)
    nodes = dict(exp.nodes)
    nodes["node2"] = replace(nodes["node2"], dp_start_rank=1)                 # overlaps node1
    nodes["node1"] = replace(nodes["node1"], headless=False)
    results = run_checks(no.facts_of(no.cluster_outputs(3)), replace(exp, nodes=nodes), only=["launch.dp_ranks"])
    by = {r.node: r for r in results}
    assert by["node0"].status == Status.FAIL and "no node runs DP rank(s) [2]" in by["node0"].message
    assert "DP rank 1 also on node2" in by["node1"].message and "needs --headless" in by["node1"].message
    assert "DP rank 1 also on node1" in by["node2"].message


def test_hccl_timeout_shorter_than_startup():
    r = result(healthy(), "launch.hccl_timeout", exp=no.expectations(hccl_connect_timeout_s=None,
                                                                      rank_start_budget_s=300))
    assert r.status == Status.WARN and "HCCL_CONNECT_TIMEOUT is 120 s" in r.message
    assert r.remediation == "HCCL_CONNECT_TIMEOUT=510"
