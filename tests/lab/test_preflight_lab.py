"""`ascendctl preflight` and `ascendctl facts` against the lab: a clean lab passes every
check, facts take one SSH round trip per host, the JSON validates against its schema and
the JUnit file is accepted by junitparser, our own units may hold NPUs and ports on a
re-deploy, and an inventory without device IPs still gets its ping matrix."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import jsonschema
import pytest
import yaml
from junitparser import JUnitXml

from ascendctl.load import load_inventory
from ascendctl.preflight.run import PreflightRequest, run_facts, run_preflight

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

# Checks that do not apply to the lab's inventory (mp mode, roce mtu/tls set): a skip
# with its reason is their only possible verdict there.
NOT_APPLICABLE = {
    ("node0", "roce.mtu.uniform"), ("node1", "roce.mtu.uniform"),
    ("node0", "roce.tls.uniform"), ("node1", "roce.tls.uniform"),
    ("node0", "launch.dp_ranks"), ("node1", "launch.dp_ranks"),
    ("node0", "net.head_ports"),             # the head does not probe itself
    # engine.kind host: no container runtime or image (nor its options: engine.unsafe); the
    # CPU build has no vllm-ascend release set (engine.hdk)
    *((n, c) for n in ("node0", "node1")
      for c in ("engine.runtime", "engine.image", "engine.image_cann", "engine.hdk",
                "engine.unsafe")),
}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout)


def schema():
    return json.loads(resources.files("ascendctl.preflight").joinpath(
        "schema/preflight.schema.json").read_text())


def test_clean_lab_every_check_passes_json_and_junit(lab, tmp_path):
    junit = tmp_path / "preflight.xml"
    proc = cli("preflight", "-i", str(lab.inventory_path), "--json", "--junit", str(junit))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schema()).validate(doc)
    assert doc["status"] == "pass"
    not_green = {(r["node"], r["id"]): (r["status"], r["message"]) for r in doc["results"]
                 if r["status"] != "pass"}
    assert set(not_green) == NOT_APPLICABLE, not_green
    assert all(s == "skip" for s, _ in not_green.values())
    # every check ran on both nodes
    assert {(r["node"], r["id"]) for r in doc["results"]} == {
        (n, c) for n in ("node0", "node1") for c in doc["checks"]}
    # the lab's real values came through
    by = {(r["node"], r["id"]): r["message"] for r in doc["results"]}
    assert "8 ping(s) answered" in by[("node0", "roce.ping")]
    assert "8 ping(s) answered" in by[("node1", "roce.ping")]
    assert "4200-byte packets pass" in by[("node0", "roce.path_mtu")]
    assert by[("node1", "net.head_ports")] == f"{lab.nodes[0].mgmt_ip} answers on 29501"
    # every fact command worked, in one remote execution per node
    assert [(n["problems"], n["remote_executions"]) for n in doc["nodes"]] == [([], 1), ([], 1)]
    xml = JUnitXml.fromfile(str(junit))
    assert xml.tests == len(doc["results"]) and xml.failures == 0 and xml.errors == 0
    assert xml.skipped == len(NOT_APPLICABLE)
    assert {s.name for s in xml} == {"preflight node0", "preflight node1"}


def test_plain_output_when_piped(lab):
    proc = cli("preflight", "-i", str(lab.inventory_path), "--only", "roce.mtu,host.clock")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"node0 ({lab.nodes[0].mgmt_ip}, rank 0): gathered in ")
    assert any(l.split()[:3] == ["roce", "roce.mtu", "pass"] for l in lines)
    assert "\x1b[" not in proc.stdout and "│" not in proc.stdout
    assert lines[-1].startswith("preflight PASS (exit 0): ")


def test_facts_take_one_round_trip_per_host(lab):
    inv = load_inventory(lab.inventory_path)
    result = run_facts(inv)
    assert result.exec_counts == {"node0": 1, "node1": 1}
    assert set(result.facts) == {"node0", "node1"} and result.failed == {}
    f1 = result.facts["node1"]
    assert [p.ip for p in f1.roce] == lab.nodes[1].device_ips
    assert {pg.target for pg in f1.pings} == set(lab.nodes[0].device_ips)   # pairs: node1 -> node0
    assert all(pg.ok for pg in f1.pings)
    report, run = run_preflight(inv)
    assert run.exec_counts == {"node0": 1, "node1": 1}
    assert [n["remote_executions"] for n in report["nodes"]] == [1, 1]
    proc = cli("facts", "-i", str(lab.inventory_path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["remote_executions"] == {"node0": 1, "node1": 1}
    assert doc["hosts"]["node0"]["npu_smi"]["chips"][0]["name"] == "910B3"


def test_inventory_without_device_ips_pings_in_a_second_round(lab, tmp_path):
    data = yaml.safe_load(lab.inventory_path.read_text())
    for host in data["all"]["children"]["nodes"]["hosts"].values():
        del host["device_ips"]
    path = tmp_path / "no-device-ips.yaml"
    path.write_text(yaml.safe_dump(data))
    inv = load_inventory(path)
    report, run = run_preflight(inv)
    # the targets are the other node's addresses from its /etc/hccn.conf: a second round
    assert run.exec_counts == {"node0": 2, "node1": 2}
    by = {(r["node"], r["id"]): r for r in report["results"]}
    for node in ("node0", "node1"):
        assert by[(node, "roce.ping")]["status"] == "pass", by[(node, "roce.ping")]
        assert by[(node, "roce.ping")]["message"].startswith("8 ping(s) answered")
        assert by[(node, "roce.ip.inventory")]["status"] == "skip"
    assert report["exit_code"] == 0, [r for r in report["results"] if r["status"] in ("fail", "warn")]


def _add_npu_process(lab, node: str, pid: int, npu: int = 0, mem_mb: int = 4000) -> None:
    script = ("import json,sys; p='/etc/ascend-sim/state.json'; s=json.load(open(p)); "
              f"s.setdefault('processes', []).append({{'npu': {npu}, 'pid': {pid}, 'mem_mb': {mem_mb}}}); "
              "open(p, 'w').write(json.dumps(s))")
    lab.exec(node, ["python3", "-c", script])
    lab.exec(node, ["ascend-sim", "sync"])


def _start_unit(lab, node: str, unit: str, port: int) -> int:
    lab.exec(node, ["systemd-run", f"--unit={unit}", "--quiet", "/usr/bin/python3", "-m",
                    "http.server", str(port), "--bind", "0.0.0.0"])
    lab.exec(node, ["sh", "-c", f"for i in $(seq 50); do ss -Hltn 'sport = :{port}' | grep -q . && "
                                "exit 0; sleep 0.1; done; exit 1"])
    return int(lab.exec(node, ["systemctl", "show", "-P", "MainPID", unit]).stdout)


def test_redeploy_own_engine_may_hold_npus_and_ports(lab):
    inv = load_inventory(lab.inventory_path)
    try:
        pid = _start_unit(lab, "node0", "ascendctl-engine", 8000)
        _add_npu_process(lab, "node0", pid)
        report, _ = run_preflight(inv)
        assert report["exit_code"] == 0, [r for r in report["results"] if r["status"] != "pass"
                                          and r["status"] != "skip"]
        allowed = report["nodes"][0]["allowed"]
        assert f"port 8000 held by ascendctl-engine.service (pid {pid})" in allowed
        assert f"NPUs held by our own engine: pid {pid}" in allowed
        from ascendctl.preflight.expectations import PreflightOptions

        strict, _ = run_preflight(inv, PreflightRequest(
            options=PreflightOptions(allow_own_units=False), only=["npu", "host.ports"]))
        failing = {(r["node"], r["id"]) for r in strict["results"] if r["status"] == "fail"}
        assert failing == {("node0", "host.ports"), ("node0", "npu.processes")}
        # somebody else's service on the API port is never allowed
        lab.exec("node0", ["systemctl", "stop", "ascendctl-engine"])
        _start_unit(lab, "node0", "old-engine", 8000)
        other, _ = run_preflight(inv, PreflightRequest(only=["host.ports"]))
        r = next(r for r in other["results"] if r["node"] == "node0" and r["id"] == "host.ports")
        assert r["status"] == "fail" and "8000" in r["message"]
        assert r["remediation"].startswith("ss -ltnp 'sport = :8000'")
    finally:
        for unit in ("ascendctl-engine", "old-engine"):
            lab.exec("node0", ["systemctl", "stop", unit], check=False)
        lab.heal("node0")


def test_facts_of_an_unreachable_host(lab):
    try:
        lab.fault("node1", "sshd-down")
        proc = cli("facts", "-i", str(lab.inventory_path), "--json", "--connect-timeout", "3")
    finally:
        lab.heal("node1")
    assert proc.returncode == 4, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["hosts"]) == {"node0"}
    assert doc["failed"]["node1"]["error_kind"] == "refused"
    assert "connection refused" in doc["failed"]["node1"]["error"]
