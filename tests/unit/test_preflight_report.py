"""The preflight verdict from gathered records: exit codes, JSON against its schema,
JUnit through a real consumer (junitparser), the console output, own units on a re-deploy."""

from __future__ import annotations

import io
import json
from importlib import resources

import jsonschema
import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from ascendctl.checks import SPECS
from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.junit import junit_xml, write_junit
from ascendctl.load import load_inventory
from ascendctl.preflight.junit import junit_report
from ascendctl.preflight.output import print_plain, print_rich
from ascendctl.preflight.report import build_report, validate_selection

from test_preflight_support import cluster_records, no, record, write_inventory

HOSTS = ["node0", "node1"]


def schema():
    text = resources.files("ascendctl.preflight").joinpath("schema/preflight.schema.json").read_text()
    return json.loads(text)


def validate(doc):
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker()).validate(doc)


@pytest.fixture
def inv(tmp_path):
    return load_inventory(write_inventory(tmp_path))


def bad(report):
    return {(r.node, r.check_id, r.status.value) for r in report.results if r.status.value in ("fail", "warn")}


def test_healthy_cluster_passes_and_the_json_validates(inv):
    report = build_report(inv, HOSTS, cluster_records(), {})
    assert report.exit_code() == Exit.OK and bad(report) == set()
    doc = report.to_dict()
    validate(doc)
    assert doc["status"] == "pass" and doc["exit_code"] == 0
    # every catalogued check, once per node; host.reachable (the executor's) first
    assert doc["checks"] == ["host.reachable"] + [i for i in SPECS if i != "host.reachable"]
    assert len(doc["results"]) == len(SPECS) * 2
    assert [r["node"] for r in doc["results"]] == ["node0"] * len(SPECS) + ["node1"] * len(SPECS)
    assert doc["summary"]["fail"] == doc["summary"]["warn"] == 0
    assert doc["summary"]["pass"] + doc["summary"]["skip"] == len(doc["results"])


def test_a_failure_names_node_check_message_and_fix(inv):
    records = cluster_records()
    out = no.cluster_outputs()
    out["node1"] = no.edit(out["node1"], "hccn:mtu:3", "mtu:9000", "mtu:1500")
    records["node1"] = record(out["node1"])
    report = build_report(inv, HOSTS, records, {})
    assert bad(report) == {("node1", "roce.mtu", "fail")}
    assert report.exit_code() == Exit.FAILED
    doc = report.to_dict()
    validate(doc)
    r = next(r for r in doc["results"] if r["status"] == "fail")
    assert r["remediation"] == "hccn_tool -i 3 -mtu -s mtu 9000"
    plain = io.StringIO()
    print_plain(doc, plain)
    text = plain.getvalue()
    assert "node1  roce.mtu  FAIL: MTU 1500 on device 3; expected 9000" in text
    assert "fix: hccn_tool -i 3 -mtu -s mtu 9000" in text
    assert text.rstrip().splitlines()[-1].strip() == "fix: hccn_tool -i 3 -mtu -s mtu 9000"


def test_warnings_only_exit_3(inv):
    out = no.cluster_outputs()
    out["node0"] = no.edit(out["node0"], "lspci", "Number of VFs: 0", "Number of VFs: 8", 8)
    out["node0"] = no.edit(out["node0"], "lspci", "IOVCtl:\tEnable-", "IOVCtl:\tEnable+", 8)
    records = {n: record(o) for n, o in out.items()}
    report = build_report(inv, HOSTS, records, {})
    assert bad(report) == {("node0", "pcie.sriov", "warn")}
    assert report.exit_code() == Exit.WARNINGS and report.status() == "warn"
    validate(report.to_dict())


def test_unreachable_node_exit_4_and_junit_says_why(inv, tmp_path):
    records = cluster_records()
    del records["node1"]
    reason = "connection refused by 198.18.0.12:22 (is sshd running?)"
    out = no.cluster_outputs()
    # node0's pings to node1 fail too: left to host.reachable, not roce.ping
    for dev, ip in no.device_ips(1).items():
        out["node0"][f"ping:{dev}:{ip}"] = no.ping_fail(dev, ip)
    records["node0"] = record(out["node0"])
    report = build_report(inv, HOSTS, records, {"node1": (reason, "refused")})
    assert bad(report) == {("node1", "host.reachable", "fail")}
    assert report.exit_code() == Exit.UNREACHABLE
    doc = report.to_dict()
    validate(doc)
    node1 = doc["nodes"][1]
    assert (node1["state"], node1["reachable"], node1["error_kind"]) == ("unreachable", False, "refused")
    reach = next(r for r in doc["results"] if r["node"] == "node1")
    assert reach["id"] == "host.reachable" and reason in reach["message"]
    assert reach["remediation"].startswith("ssh -p 22 root@198.18.0.12 true")
    path = tmp_path / "out" / "junit.xml"
    write_junit(junit_report(doc), path)
    xml = JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"preflight node0", "preflight node1"}
    cases1 = list(suites["preflight node1"])
    assert {c.name for c in cases1} == set(doc["checks"])      # every check, each failing
    for case in cases1:
        assert not case.is_passed and not case.is_skipped
        (failure,) = case.result
        assert isinstance(failure, Failure)
        assert failure.type == "unreachable" and reason in failure.message
    assert suites["preflight node1"].failures == len(doc["checks"])
    assert suites["preflight node0"].failures == 0


def test_unreachable_wins_over_failures(inv):
    out = no.cluster_outputs()
    out["node0"] = no.edit(out["node0"], "hccn:link:0", "UP", "DOWN")
    report = build_report(inv, HOSTS, {"node0": record(out["node0"])},
                          {"node1": ("timeout: no answer from 198.18.0.12:22 within 10s", "timeout")})
    assert ("node0", "roce.link", "fail") in bad(report)
    assert report.exit_code() == Exit.UNREACHABLE


def test_gather_that_printed_garbage_is_a_failure_not_unreachable(inv):
    records = cluster_records()
    records["node1"] = {**records["node1"], "output": "",
                        "stderr": "bash: line 9: mktemp: command not found\n", "exit_status": 70}
    report = build_report(inv, HOSTS, records, {})
    assert bad(report) == {("node1", "host.reachable", "fail")}
    assert report.exit_code() == Exit.FAILED
    r = next(r for r in report.results if r.node == "node1")
    assert "gather script failed" in r.message and "mktemp: command not found" in r.message
    assert report.to_dict()["nodes"][1]["state"] == "gather_failed"


def test_junit_one_testcase_per_check_and_node_with_fix_in_the_body(inv):
    out = no.cluster_outputs()
    out["node1"] = no.edit(out["node1"], "npu_smi_health:2:0", "OK", "Alarm")
    out["node0"] = no.edit(out["node0"], "lspci", "Number of VFs: 0", "Number of VFs: 8", 8)
    report = build_report(inv, HOSTS, {n: record(o) for n, o in out.items()}, {})
    doc = report.to_dict()
    xml = JUnitXml.fromstring(junit_xml(junit_report(doc)).decode())
    cases = {(s.name.split()[-1], c.name): c for s in xml for c in s}
    assert len(cases) == len(doc["results"]) == 2 * len(SPECS)
    failed = {k for k, c in cases.items() if any(isinstance(r, (Failure, Error)) for r in c.result)}
    skipped = {k for k, c in cases.items() if any(isinstance(r, Skipped) for r in c.result)}
    expected_fail = {(r["node"], r["id"]) for r in doc["results"] if r["status"] == "fail"}
    assert failed == expected_fail and ("node1", "npu.health") in failed
    assert skipped == {(r["node"], r["id"]) for r in doc["results"] if r["status"] == "skip"}
    health = cases[("node1", "npu.health")].result[0]
    assert "NPU 2/0 Alarm" in health.message
    assert "remediation: npu-smi info -t health -i 2 -c 0" in health.text
    # a warning passes in JUnit and says so in system-out (exit code 3 carries it)
    sriov = cases[("node0", "pcie.sriov")]
    assert sriov.is_passed and "WARNING" in sriov.system_out and "sriov_numvfs" in sriov.system_out
    assert xml.tests == len(cases) and xml.failures == len(expected_fail)


def test_only_and_skip_select_checks_and_reject_typos(inv):
    only = validate_selection(["roce", "versions.pinned"], "--only")
    report = build_report(inv, HOSTS, cluster_records(), {}, only=only,
                          skip=validate_selection(["roce.ping,roce.path_mtu"], "--skip"))
    ids = {r.check_id for r in report.results}
    assert ids == {i for i in SPECS if i.startswith("roce.") and i not in ("roce.ping", "roce.path_mtu")} \
        | {"versions.pinned"}
    assert report.to_dict()["checks"] == [i for i in SPECS if i in ids]     # catalogue order
    # an unreachable node is reported even when host.reachable is not selected
    report = build_report(inv, HOSTS, {"node0": cluster_records()["node0"]},
                          {"node1": ("refused", "refused")}, only=["roce.mtu"])
    assert {(r.node, r.check_id) for r in report.results} == {("node0", "roce.mtu"), ("node1", "host.reachable")}
    with pytest.raises(InputError) as err:
        validate_selection(["rocee"], "--only")
    assert err.value.exit_code == 2 and "'rocee'" in str(err.value)


def test_own_units_may_hold_ports_and_npus_on_a_redeploy(inv):
    engine_pid, stranger = 40001, 40002
    out = no.cluster_outputs()
    out["node0"] = dict(out["node0"])
    out["node0"]["ss"] = no.SS_LISTEN + (
        f'LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:(("python3",pid={engine_pid},fd=20))\n'
        f'LISTEN 0 4096 0.0.0.0:13389 0.0.0.0:* users:(("python3",pid={stranger},fd=9))\n')
    table = out["node0"]["npu_smi_info"]
    lines = table.splitlines()
    at = next(i for i, l in enumerate(lines) if "No running processes found in NPU 0" in l)
    row = lines[at]
    width = len(row)
    proc = f"| 0       0                 | {engine_pid:<23} | vllm                     | 58000                   |"
    lines[at] = proc[:width].ljust(width - 1) + "|" if len(proc) < width else proc
    out["node0"]["npu_smi_info"] = "\n".join(lines) + "\n"
    owners = {engine_pid: "ascendctl-engine.service"}
    records = {"node0": record(out["node0"], owners), "node1": record(out["node1"])}
    report = build_report(inv, HOSTS, records, {})
    found = bad(report)
    # 8000 and NPU 0 are our engine's; 13389 is held by a stranger
    assert found == {("node0", "host.ports", "fail")}, found
    ports = next(r for r in report.results if r.check_id == "host.ports" and r.node == "node0")
    assert "13389" in ports.message and "8000" not in ports.message
    node0 = report.to_dict()["nodes"][0]
    assert "port 8000 held by ascendctl-engine.service (pid 40001)" in node0["allowed"]
    assert any("pid 40001" in a and "NPU" in a for a in node0["allowed"])
    from ascendctl.preflight.expectations import PreflightOptions

    strict = build_report(inv, HOSTS, records, {}, options=PreflightOptions(allow_own_units=False))
    assert {("node0", "host.ports", "fail"), ("node0", "npu.processes", "fail")} <= bad(strict)


def test_a_child_that_held_our_port_for_a_moment_is_not_a_stranger(inv):
    """CI caught it: `ss` listed the exporter's port 9101 with the exporter and a child it
    had just forked for npu-smi (between fork and exec a child holds its parent's
    listening socket); the child was gone when the units were listed, and the deploy's
    preflight called our own exporter's port taken. The owners are listed after the facts
    with the PIDs alive then: a holder gone since holds nothing."""
    exporter, child, stranger = 40001, 40005, 40002
    out = dict(no.cluster_outputs()["node0"])

    def node0(ss_users: str, alive: set[int]) -> dict:
        sections = dict(out, ss=no.SS_LISTEN +
                        f"LISTEN 0 5 0.0.0.0:9101 0.0.0.0:* users:({ss_users})\n")
        return {"node0": record(sections, {exporter: "ascendctl-exporter.service"}, alive),
                "node1": cluster_records()["node1"]}

    both = f'("python3",pid={child},fd=3),("python3",pid={exporter},fd=3)'
    report = build_report(inv, HOSTS, node0(both, {1, exporter}), {})
    assert ("node0", "host.ports", "fail") not in bad(report), bad(report)
    assert f"port 9101 held by ascendctl-exporter.service (pid {exporter})" in \
        report.to_dict()["nodes"][0]["allowed"]
    # the same child still alive outside our units is a stranger holding the port
    report = build_report(inv, HOSTS, node0(both, {1, exporter, child}), {})
    ports = next(r for r in report.results if r.check_id == "host.ports" and r.node == "node0")
    assert ports.status.value == "fail" and "9101" in ports.message
    # a stranger alone, alive: taken; gone by the listing: the port is free again
    alone = f'("python3",pid={stranger},fd=3)'
    assert ("node0", "host.ports", "fail") in bad(build_report(inv, HOSTS,
                                                               node0(alone, {1, stranger}), {}))
    report = build_report(inv, HOSTS, node0(alone, {1}), {})
    assert ("node0", "host.ports", "fail") not in bad(report)
    assert f"port 9101 held by nothing any more (pid {stranger} exited)" in \
        report.to_dict()["nodes"][0]["allowed"]


def test_the_owners_listing_runs_after_the_facts_and_names_the_living(tmp_path):
    """The script as the gather round sends it, run here by bash: the owners block comes
    after every fact command has finished, and lists this test's own PID as alive."""
    import os
    import subprocess

    from ascendctl.facts import GatherParams, build_gather_script
    from ascendctl.preflight.owners import owners_script, parse_owners

    nonce = "0123abcd0123abcd"
    script = build_gather_script(GatherParams(), nonce, after_facts=owners_script(nonce))
    assert script.index(owners_script(nonce).splitlines()[0]) > script.rindex("\nwait\n")
    text = subprocess.run(["bash", "-s"], input=owners_script(nonce), text=True,
                          capture_output=True, timeout=60).stdout
    owners = parse_owners(text)
    assert owners.alive is not None and os.getpid() in owners.alive and 1 in owners.alive
    assert owners.present({os.getpid(), 4_000_000_000}) == {os.getpid()}


def test_rich_output_groups_by_node_and_category(inv):
    from rich.console import Console

    out = no.cluster_outputs()
    out["node1"] = no.edit(out["node1"], "hccn:tls:4", "tls switch[0]", "tls switch[1]")
    doc = build_report(inv, HOSTS, {n: record(o) for n, o in out.items()}, {}).to_dict()
    console = Console(record=True, width=200, force_terminal=True)
    print_rich(doc, console)
    text = console.export_text()
    assert "node0 (198.18.0.11, rank 0)" in text and "node1 (198.18.0.12, rank 1)" in text
    assert text.count("roce.tls ") >= 2
    assert "fix: hccn_tool -i 4 -tls -s enable 0" in text
    assert "preflight FAILED (exit 1)" in text
