"""Table-driven over every lab fault kind (ascendctl_lab.faults.FAULT_KINDS): inject it on
node1, run the preflight, and exactly the check(s) docs/checks.md names trip - on node1,
at their severity, with their remediation - while everything else passes; heal; next.
One lab for the whole table."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from ascendctl.load import load_inventory
from ascendctl.preflight.expectations import PreflightOptions
from ascendctl.preflight.run import PreflightRequest, run_preflight
from ascendctl_lab.faults import FAULT_KINDS

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

NODE = "node1"
CONNECT_TIMEOUT = 5.0
# The clock fault is 300 s; a wide tolerance keeps a loaded 2-core machine (slow round
# trips make the clock unmeasurable to 1 s) from turning host.clock into a warning.
CLOCK_TOLERANCE = 5.0

# kind -> ({check id: status}, exit code, {check id: text its remediation must contain}).
# `{ip0}` is node1's port-0 device IP, `{gw}` the lab's RoCE gateway, `{mgmt}` node1's
# SSH address, `{x}` the lab's index.
TABLE = {
    "firmware-incompatible": ({"versions.driver_firmware": "fail", "versions.pinned": "fail"}, 1,
                              {"versions.driver_firmware": "npu-firmware",
                               "versions.pinned": "install firmware 7.8.0.2.212"}),
    "cann-incompatible": ({"versions.cann_driver": "fail", "versions.pinned": "fail"}, 1,
                          {"versions.cann_driver": "V100R001C23",
                           "versions.pinned": "install CANN 8.5.1"}),
    "driver-old": ({"versions.cann_driver": "fail", "versions.pinned": "fail"}, 1,
                   {"versions.cann_driver": "V100R001C17", "versions.pinned": "install driver 25.3.rc1"}),
    "cann-missing": ({"versions.cann_present": "fail"}, 1,
                     {"versions.cann_present": "Ascend-cann-toolkit"}),
    "driver-not-loaded": ({"npu.smi": "fail"}, 1, {"npu.smi": "reboot"}),
    "npu-unhealthy": ({"npu.health": "fail"}, 1, {"npu.health": "npu-smi info -t health -i 0 -c 0"}),
    "npu-missing": ({"npu.count": "fail"}, 1, {"npu.count": "npu-smi info"}),
    "hbm-leftover": ({"npu.processes": "fail"}, 1, {"npu.processes": "kill "}),
    "roce-link-down": ({"roce.link": "fail"}, 1, {"roce.link": "hccn_tool -i 0 -link_stat -g"}),
    "mtu-mismatch": ({"roce.mtu": "fail"}, 1, {"roce.mtu": "hccn_tool -i 0 -mtu -s mtu 4200"}),
    "device-ip-missing": ({"roce.ip": "fail"}, 1,
                          {"roce.ip": "hccn_tool -i 0 -ip -s address {ip0} netmask 255.255.255.0"}),
    "device-ip-duplicate": ({"roce.ip.unique": "fail"}, 1,
                            {"roce.ip.unique": "hccn_tool -i 0 -ip -s address {ip0} netmask"}),
    "tls-mismatch": ({"roce.tls": "fail"}, 1, {"roce.tls": "hccn_tool -i 0 -tls -s enable 0"}),
    "net-health-fail": ({"roce.net_health": "fail"}, 1,
                        {"roce.net_health": "hccn_tool -i 0 -ping -g address 198.19.{x}.254"}),
    "netdetect-missing": ({"roce.netdetect": "warn"}, 3,
                          {"roce.netdetect": "hccn_tool -i 0 -netdetect -s address {gw}"}),
    "disk-small": ({"host.disk": "fail"}, 1, {"host.disk": "df -h /var/lib/ascendctl"}),
    "sshd-down": ({"host.reachable": "fail"}, 4, {"host.reachable": "ssh -p 22 root@{mgmt} true"}),
    "power-off": ({"host.reachable": "fail"}, 4, {"host.reachable": "ssh -p 22 root@{mgmt} true"}),
    "clock-skew": ({"host.clock": "fail"}, 1, {"host.clock": "chronyc makestep"}),
    "bios-sriov-on": ({"pcie.sriov": "warn"}, 3, {"pcie.sriov": "sriov_numvfs"}),
    "bios-acs-on": ({"pcie.acs": "warn"}, 3, {"pcie.acs": "setpci -s"}),
    "bios-above4g-off": ({"pcie.above4g": "fail"}, 1, {"pcie.above4g": "Above 4G Decoding"}),
}
UNREACHABLE = {"sshd-down", "power-off"}
# Faults of a serving node that the fault monitor reads (docs/faults.md; tested on the
# replicas lab and by tests/lab/test_lab_faults.py), not what preflight judges before a
# deploy: counters that moved, a spike, a flapping port, a log line, a hung engine.
# (chip-alarm's Alarm is npu-unhealthy's, which the table has.)
RUNTIME_FAULTS = {"ecc-singlebit", "ecc-multibit", "chip-alarm", "temp-spike", "roce-flap",
                  "plog-error", "engine-hang"}


def test_the_table_covers_every_fault_kind():
    assert set(TABLE) | RUNTIME_FAULTS == set(FAULT_KINDS)
    assert not set(TABLE) & RUNTIME_FAULTS


@pytest.fixture(scope="module")
def schema():
    return json.loads(resources.files("ascendctl.preflight").joinpath(
        "schema/preflight.schema.json").read_text())


@pytest.fixture(scope="module")
def clean(lab):
    """The lab passes before the table starts (so a trip below is the fault's)."""
    lab.heal()
    inv = load_inventory(lab.inventory_path)
    report, _ = run_preflight(inv, _request())
    assert report["exit_code"] == 0, [r for r in report["results"] if r["status"] in ("fail", "warn")]
    return inv


def _request() -> PreflightRequest:
    return PreflightRequest(connect_timeout=CONNECT_TIMEOUT,
                            options=PreflightOptions(clock_tolerance_s=CLOCK_TOLERANCE))


@pytest.mark.parametrize("kind", list(TABLE))
def test_fault_trips_exactly_its_check(lab, clean, schema, kind):
    expected, exit_code, fixes = TABLE[kind]
    node1 = lab.node(NODE)
    subst = {"ip0": node1.device_ips[0], "gw": f"198.19.{lab.index}.1", "mgmt": node1.mgmt_ip,
             "x": lab.index}
    try:
        lab.fault(NODE, kind)
        report, run = run_preflight(clean, _request())
    finally:
        lab.heal(NODE)
    jsonschema.Draft202012Validator(schema).validate(report)
    tripped = {(r["node"], r["id"]): r for r in report["results"] if r["status"] in ("fail", "warn")}
    assert {k: r["status"] for k, r in tripped.items()} == {(NODE, c): s for c, s in expected.items()}, \
        {k: r["message"] for k, r in tripped.items()}
    assert report["exit_code"] == exit_code
    for check, text in fixes.items():
        r = tripped[(NODE, check)]
        assert r["message"] and text.format(**subst) in r["remediation"], (check, r["remediation"])
    # node0 was checked in full and is clean
    node0 = [r for r in report["results"] if r["node"] == "node0"]
    assert len(node0) == len(report["checks"]) and all(r["status"] in ("pass", "skip") for r in node0)
    if kind in UNREACHABLE:
        state = report["nodes"][1]
        assert state["state"] == "unreachable" and not state["reachable"]
        # reported within the connect timeout of each attempt (plus the retries' back-off)
        gather = next(t for p in run.plays for t in p.tasks if t.module == "preflight_gather")
        attempts = clean.host(NODE).ssh.connect_retries + 1
        assert gather.results[NODE].duration <= attempts * CONNECT_TIMEOUT + 2 * attempts, \
            gather.results[NODE].duration
        # every check of the unreachable node is only host.reachable's finding
        assert [r["id"] for r in report["results"] if r["node"] == NODE] == ["host.reachable"]
