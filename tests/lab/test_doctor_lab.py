"""`ascendctl doctor` on errors produced for real on the lab: the head's engine started
with its API port taken, with a flag vLLM does not know, with a weight file missing; a
follower started while the head is not there; RoCE TLS enabled on one node only. Doctor
must name the node, show the log line, cause and fix for each, and its bundle must hold
the logs of every node and never the API key.

Uses the deployment on the engine suite's shared lab (`gang`, tests/conftest.py) that
test_health_lab.py made, test_bench_lab.py measured and
test_ci_pipeline_lab.py ran the CI pipeline on; leaves its engines stopped and its
faults healed for test_health_dp_lab.py. The engines are started and stopped through
their systemd unit (never by name); at most one engine per node runs at any time, so
never more than two on this machine.
"""

from __future__ import annotations

import json
import tarfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from test_bench_lab import (  # tests/lab is on sys.path, like tests/unit's helpers
    API_KEY, ROOT, ascendctl, node_sh, shared_deployment, wait_for_engine_slots,
)

# Waiting for engine slots on a shared machine and a deploy can take longer than the
# default per-test timeout.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(5400)]
# ... and runs right after that module (tests/conftest.py), while its engines are up.
SHARES_DEPLOYMENT_OF = "test_ci_pipeline_lab"

UNIT = "ascendctl-engine"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.service.d"

# Start the engine unit and wait until its main process has exited once (it fails), then
# stop it (Restart=always would start it again). Prints the journal since the start. The
# journal cursor (not a time) marks the start: a previous run's exit may share its second.
RUN_UNTIL_EXIT = f"""
C=$(journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p'); systemctl start {UNIT}
for i in $(seq 900); do
  journalctl -u {UNIT} --after-cursor "$C" -o cat | grep -q 'Main process exited' && break
  sleep 1
done
systemctl stop {UNIT}
journalctl -u {UNIT} --after-cursor "$C" -o cat --no-pager | tail -n 400
"""


def with_argv(extra: list[str]) -> str:
    """A drop-in that runs the release's engine with extra arguments (the release itself
    stays untouched), then RUN_UNTIL_EXIT, then the drop-in is removed."""
    args = json.dumps(extra)
    return f"""
mkdir -p /run/doctor-test {DROPIN_DIR}
python3 -c 'import json,sys; d=json.load(open("{ROOT}/current/engine.json")); d["argv"] += json.loads(sys.argv[1]); json.dump(d, open("/run/doctor-test/engine.json","w"))' '{args}'
printf '[Service]\\nExecStart=\\nExecStart=/usr/bin/python3 -m ascendctl_runtime.launcher /run/doctor-test/engine.json\\n' > {DROPIN_DIR}/doctor-test.conf
systemctl daemon-reload
{RUN_UNTIL_EXIT}
rm -f {DROPIN_DIR}/doctor-test.conf; systemctl daemon-reload
"""


PORT_TAKEN = f"""
systemd-run --unit doctor-squatter --collect python3 -m http.server 8000 --bind 0.0.0.0
sleep 1
{RUN_UNTIL_EXIT}
systemctl stop doctor-squatter
"""


@pytest.fixture(scope="module")
def broken(request, gang):
    """Produce the failures on the shared deployment, then take its engines down."""
    state = shared_deployment(gang)
    lab = state["lab"]
    for node in ("node1", "node0"):
        node_sh(state, node, f"systemctl stop {UNIT}", timeout=200)
    state.pop("release", None)
    wait_for_engine_slots()

    def head() -> list[str]:
        return [node_sh(state, "node0", PORT_TAKEN, timeout=1200),
                node_sh(state, "node0", with_argv(["--no-such-flag"]), timeout=1200)]

    def follower() -> list[str]:
        # the head is down: the follower waits for its rendezvous, then gives up
        return [node_sh(state, "node1", with_argv(["--distributed-timeout-seconds", "20"]),
                        timeout=1200)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        head_logs, follower_logs = pool.submit(head), pool.submit(follower)
        logs = {"node0": head_logs.result(), "node1": follower_logs.result()}

    # a weight file of the head's stage missing: the head fails loading (both ranks up)
    model = f"{ROOT}/current/model"
    name = node_sh(state, "node0", f"ls {model} | grep safetensors$ | head -1").strip()
    node_sh(state, "node0", f"mv {model}/{name} /run/doctor-test/{name}")
    try:
        node_sh(state, "node0", f"systemctl start {UNIT}")
        logs["node0"].append(node_sh(state, "node1", f"systemctl start {UNIT}; sleep 2; "
                                     "echo started"))
        logs["node0"].append(node_sh(state, "node0", RUN_UNTIL_EXIT.replace(
            f"systemctl start {UNIT}\n", "\n"), timeout=1200))
        node_sh(state, "node1", f"systemctl stop {UNIT}", timeout=200)
    finally:
        node_sh(state, "node0", f"mv /run/doctor-test/{name} {model}/{name}")
    lab.fault("node1", "tls-mismatch")
    request.addfinalizer(lambda: lab.heal("node1"))
    state["broken"] = {"logs": logs, "weight": name}
    return state


def findings_by(report: dict) -> dict[tuple[str, str], dict]:
    return {(f["id"], f["node"]): f for f in report["findings"]}


def test_doctor_explains_each_failure_on_its_node(broken):
    state = broken
    bundle = state["dir"] / "doctor.tar.gz"
    result = ascendctl("doctor", "-i", str(state["inv"]), "--since", "30m", "--bundle",
                       str(bundle), "--json", timeout=1200)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    found = findings_by(report)
    expected = {("DS-12", "node0"): "Address already in use",
                ("DS-36", "node0"): "unrecognized arguments: --no-such-flag",
                ("DS-37", "node0"): state["broken"]["weight"],
                ("DS-11", "node1"): "29501"}
    for key, text in expected.items():
        assert key in found, (key, sorted(found))
        finding = found[key]
        assert text in finding["line"], (key, finding["line"])
        assert finding["cause"] and finding["fix"] and finding["count"] >= 1
        assert finding["file"] == f"{key[1]}/journal/ascendctl-engine.service.log"
    # the TLS switch differs between the nodes: one finding naming both
    [tls] = [f for f in report["findings"] if f["id"] == "DS-34"]
    assert "tls=1 on node1 (8 ports)" in tls["cause"] and "tls=0 on node0" in tls["cause"]
    # the follower's unreachable head names the head's address and master port
    head_ip = state["lab"].nodes[0].mgmt_ip
    assert head_ip in found[("DS-11", "node1")]["line"]
    assert [n["status"] for n in report["nodes"]] == ["ok", "ok"]
    state["doctor_json"] = result.stdout
    state["bundle"] = bundle


def test_doctor_prints_node_line_cause_and_fix(broken):
    result = ascendctl("doctor", "-i", str(broken["inv"]), "--since", "30m", timeout=1200)
    assert result.returncode == 1
    out = result.stdout
    assert "DS-12 Port already in use — node0" in out
    assert "OSError: [Errno 98] Address already in use" in out
    assert "DS-11 Follower cannot reach the head (c10d TCPStore) — node1" in out
    for label in ("log:", "cause:", "fix:", "in:"):
        assert out.count(label) >= 5
    assert "probable root cause" in out


def test_bundle_holds_every_node_s_logs_and_no_secret(broken):
    state = broken
    if "bundle" not in state:    # run alone: make the bundle here (never skip)
        bundle = state["dir"] / "doctor-alone.tar.gz"
        result = ascendctl("doctor", "-i", str(state["inv"]), "--since", "30m", "--bundle",
                           str(bundle), "--json", timeout=1200)
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
        state["doctor_json"], state["bundle"] = result.stdout, bundle
    with tarfile.open(state["bundle"]) as tar:
        members = {m.name: tar.extractfile(m).read().decode("utf-8", "replace")
                   for m in tar.getmembers() if m.isfile()}
    [root] = {name.split("/", 1)[0] for name in members}
    manifest = json.loads(members[f"{root}/manifest.json"])
    assert [n["name"] for n in manifest["nodes"]] == ["node0", "node1"]
    for node in ("node0", "node1"):
        journal = members[f"{root}/{node}/journal/ascendctl-engine.service.log"]
        assert f" {node} ascendctl-engine[" in journal      # that node's engine log
        assert f"{root}/{node}/npu/npu-smi-info.txt" in members
        assert f"{root}/{node}/state/release/engine.json" in members
        assert not any(name.endswith("secrets.env") for name in members)
    assert "OSError: [Errno 98] Address already in use" in \
        members[f"{root}/node0/journal/ascendctl-engine.service.log"]
    assert "The client socket has timed out" in \
        members[f"{root}/node1/journal/ascendctl-engine.service.log"]
    leaks = [name for name, text in members.items() if API_KEY in text]
    assert leaks == []
    assert API_KEY not in state["doctor_json"]
    # and the key is really there on the nodes, so the check above means something
    assert API_KEY in node_sh(state, "node0", f"cat {ROOT}/current/secrets.env")
