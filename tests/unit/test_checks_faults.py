"""Every fault kind of issue 2 trips exactly its check(s) on the faulty node, nothing else.

Faulty nodes are the healthy captured outputs with the text edited the way the fault
shows through the real tools.
"""

import importlib.util
from pathlib import Path

import pytest

from ascendctl.checks import Status, overall_status, run_checks

_spec = importlib.util.spec_from_file_location(
    "node_outputs", Path(__file__).resolve().parents[1] / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)


def tripped(outputs, exp=None, unreachable=()):
    results = run_checks(no.facts_of(outputs), exp or no.expectations(), unreachable=unreachable)
    return {(r.node, r.check_id) for r in results if r.status in (Status.FAIL, Status.WARN)}, results


def test_healthy_cluster_passes_everything():
    found, results = tripped(no.cluster_outputs())
    assert found == set()
    assert overall_status(results) == Status.PASS
    assert len({r.check_id for r in results}) >= 30
    statuses = {r.check_id: r.status for r in results if r.node == "node1"}
    assert statuses["roce.ping"] == Status.PASS and statuses["net.head_ports"] == Status.PASS


def _fault_firmware_out_of_range(o):
    n1 = o["node1"]
    o["node1"] = no.edit(n1, "version:firmware", "Version=7.8.0.2.212", "Version=9.0.0.1.100")


def _fault_cann_missing(o):
    o["node1"]["version:toolkit"] = ("", "no ascend_toolkit_install.info\n", 2)
    o["node1"].pop("version:cfg", None)


def _fault_npu_unhealthy(o):
    row = "| 3     910B3               | OK            | 96.2        43                0    / 0             |"
    o["node1"] = no.edit(o["node1"], "npu_smi_info", row, row.replace("| OK            |", "| Alarm         |"))
    o["node1"]["npu_smi_health:3:0"] = no.health_alarm()


def _fault_fewer_npus(o):
    table = o["node1"]["npu_smi_info"]
    lines = table.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("| 7     910B3"))
    del lines[i:i + 3]                                  # NPU 7's two rows and its separator
    lines = [l for l in lines if "No running processes found in NPU 7" not in l]
    o["node1"]["npu_smi_info"] = "\n".join(lines) + "\n"
    o["node1"].pop("npu_smi_health:7:0")


def _fault_leftover_process(o):
    n1 = no.edit(o["node1"], "npu_smi_info", "3389 / 65536", "62810/ 65536")
    row = "| No running processes found in NPU 0                                                            |"
    o["node1"] = no.edit(n1, "npu_smi_info", row,
                         "| 0       0                 | 842           | /usr/local/pyth          | 59017                   |")


def _fault_link_down(o):
    n1 = no.edit(o["node1"], "hccn:link:3", "UP", "DOWN")
    o["node1"] = no.edit(n1, "hccn:net_health:3", "Success", "Receive timeout")
    o["node1"]["ping:3:11.12.165.83"] = no.ping_fail(3, "11.12.165.83")
    o["node0"]["ping:3:11.12.165.93"] = no.ping_fail(3, "11.12.165.93")


def _fault_mtu_mismatch(o):
    o["node1"] = no.edit(o["node1"], "hccn:mtu:3", "mtu:9000", "mtu:1500")


def _fault_ip_missing(o):
    o["node1"]["hccn:ip:2"] = ""
    o["node1"]["ping:2:11.12.165.82"] = ("", "timeout", 124)
    o["node0"]["ping:2:11.12.165.92"] = no.ping_fail(2, "11.12.165.92")


def _fault_ip_duplicated(o):
    o["node1"] = no.edit(o["node1"], "hccn:ip:2", "11.12.165.92", "11.12.165.82")
    o["node0"]["ping:2:11.12.165.92"] = no.ping_fail(2, "11.12.165.92")


def _fault_tls_mismatch(o):
    for dev in range(8):
        o["node1"] = no.edit(o["node1"], f"hccn:tls:{dev}", "tls switch[0]", "tls switch[1]")


def _fault_net_health(o):
    o["node1"] = no.edit(o["node1"], "hccn:net_health:5", "Success", "Receive timeout")


def _fault_netdetect_missing(o):
    o["node1"]["hccn:netdetect:5"] = ""
    o["node1"] = no.edit(o["node1"], "hccn:net_health:5", "Success", "Init")


def _fault_disk_small(o):
    o["node1"] = no.edit(o["node1"], "df", "1200000000000 2640000000000", "3733000000000 107000000000")


def _fault_clock_skew(o):
    o["node1"]["clock_start"] = "1767225630.100000000\n"
    o["node1"]["clock_end"] = "1767225631.300000000\n"


def _fault_sriov_on(o):
    o["node1"] = no.edit(o["node1"], "lspci", "Number of VFs: 0", "Number of VFs: 8", 8)
    o["node1"] = no.edit(o["node1"], "lspci", "IOVCtl:\tEnable-", "IOVCtl:\tEnable+", 8)


def _fault_acs_on(o):
    o["node1"] = no.edit(o["node1"], "lspci", "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-",
                         "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+", 4)


def _fault_above4g_off(o):
    # the firmware could not place the 2G BARs above 4 GiB: they end up unassigned
    o["node1"] = no.edit_re(o["node1"], "lspci", r"Region 2: Memory at [0-9a-f]+ \(64-bit, prefetchable\)",
                            "Region 2: Memory at <unassigned> (64-bit, prefetchable)", count=8)


FAULTS = [
    ("version mismatch (firmware outside the driver's range)", _fault_firmware_out_of_range,
     {"versions.driver_firmware", "versions.uniform"}),
    ("CANN missing", _fault_cann_missing, {"versions.cann_present"}),
    ("NPU unhealthy", _fault_npu_unhealthy, {"npu.health"}),
    ("fewer NPUs", _fault_fewer_npus, {"npu.count"}),
    ("HBM held by a leftover process", _fault_leftover_process, {"npu.processes"}),
    ("RoCE link down", _fault_link_down, {"roce.link"}),
    ("MTU mismatch", _fault_mtu_mismatch, {"roce.mtu"}),
    ("device IP missing", _fault_ip_missing, {"roce.ip"}),
    ("device IP duplicated", _fault_ip_duplicated, {"roce.ip.unique"}),
    ("TLS mismatch", _fault_tls_mismatch, {"roce.tls"}),
    ("net_health failure", _fault_net_health, {"roce.net_health"}),
    ("netdetect missing", _fault_netdetect_missing, {"roce.netdetect"}),
    ("disk too small", _fault_disk_small, {"host.disk"}),
    ("clock skew", _fault_clock_skew, {"host.clock"}),
    ("SR-IOV on", _fault_sriov_on, {"pcie.sriov"}),
    ("ACS on", _fault_acs_on, {"pcie.acs"}),
    ("Above 4G decoding off", _fault_above4g_off, {"pcie.above4g"}),
]


@pytest.mark.parametrize("name,inject,expected", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_trips_exactly_its_check(name, inject, expected):
    outputs = no.cluster_outputs()
    inject(outputs)
    found, results = tripped(outputs)
    assert found == {("node1", c) for c in expected}, name
    for r in results:
        if (r.node, r.check_id) in found:
            assert r.remediation and r.message


def test_mtu_and_tls_without_inventory_values_trip_the_uniform_checks():
    outputs = no.cluster_outputs()
    _fault_mtu_mismatch(outputs)
    _fault_tls_mismatch(outputs)
    found, results = tripped(outputs, no.expectations(roce_mtu=None, roce_tls=None))
    assert found == {("node1", "roce.mtu.uniform"), ("node1", "roce.tls.uniform")}
    mtu = next(r for r in results if r.node == "node1" and r.check_id == "roce.mtu.uniform")
    assert mtu.remediation == "hccn_tool -i 3 -mtu -s mtu 9000"
    tls = next(r for r in results if r.node == "node1" and r.check_id == "roce.tls.uniform")
    assert "hccn_tool -i 0 -tls -s enable 0" in tls.remediation


def test_version_mismatch_with_pinned_firmware():
    outputs = no.cluster_outputs()
    _fault_firmware_out_of_range(outputs)
    exp = no.expectations(versions=no.expectations().versions.__class__(
        driver="25.3.rc1", firmware="7.8.0.2.212", vllm_ascend="0.18.0"))
    found, _ = tripped(outputs, exp)
    assert found == {("node1", "versions.driver_firmware"), ("node1", "versions.pinned")}


def test_unreachable_node_is_left_to_the_executor():
    outputs = no.cluster_outputs()
    for dev, ip in no.device_ips(1).items():        # node1 is off: node0's pings to it time out
        outputs["node0"][f"ping:{dev}:{ip}"] = no.ping_fail(dev, ip)
    found, results = tripped(outputs, unreachable=("node1",))
    assert found == set()
    assert {r.node for r in results} == {"node0"}
    ping = next(r for r in results if r.check_id == "roce.ping")
    assert ping.status == Status.SKIP


def test_head_unreachable_skips_follower_probes_and_firewalled_head_fails():
    outputs = no.cluster_outputs()
    outputs["node1"]["probes"] = f"{no.HEAD_IP} 8000 timeout\n{no.HEAD_IP} 13389 refused\n"
    found, results = tripped(outputs)
    assert found == {("node1", "net.head_ports")}
    r = next(r for r in results if r.check_id == "net.head_ports" and r.node == "node1")
    assert "8000 (timeout)" in r.message and "firewall-cmd --add-port=$p/tcp" in r.remediation
    found, _ = tripped(outputs, unreachable=("node0",))
    assert found == set()


def test_driver_not_loaded_is_one_finding():
    # driver upgraded without a reboot: npu-smi and hccn_tool both fail with -8005
    outputs = no.cluster_outputs()
    n1 = outputs["node1"]
    n1["npu_smi_info"] = ("", "dcmi module initialize failed. ret is -8005\n", 255)
    for key in list(n1):
        if key.startswith("hccn:"):
            n1[key] = ("dsmi_get_device_info failed, ret = -8005\n", 1)
        if key.startswith("npu_smi_health") or key.startswith("npu_smi_board") or key == "npu_smi_topo":
            n1[key] = ("", "dcmi module initialize failed. ret is -8005\n", 255)
        if key.startswith("ping:"):
            n1[key] = ("dsmi_get_device_info failed, ret = -8005\n", 1)
    for dev, ip in no.device_ips(1).items():
        outputs["node0"][f"ping:{dev}:{ip}"] = no.ping_fail(dev, ip)
    found, _ = tripped(outputs)
    assert found == {("node1", "npu.smi")}
