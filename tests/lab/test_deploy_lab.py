"""Deploy, status, history and rollback end to end on the lab, with the lab's stand-in engine.

The subject is the orchestration (the release, its key, rank order, the lock, what a
failure at each step rolls back to), so the nodes run the lab's stand-in for `vllm serve`
(docs/lab.md): it parses the flags as vLLM does and dies with its gang as vLLM does, and
starts in seconds. The real engine's end-to-end tests of first deploy, a new release and
rollback are test_engine_deploy_lab.py, test_bench_lab.py and test_replicas_lab.py
(with the quality gate's).

One 2-node lab serves the whole module; the tests run in order, each starting from the
state the previous one left (deploys are minutes each, so the scenarios share them):

  A  first deploy (with an API key) serves through the head; status shows both ranks
  B  the same inventory again: 0 changed, engine PIDs unchanged
  C  a changed setting: a new release, ranks restarted in order; a concurrent deploy is
     refused by the lock, naming the holder; history lists both
  D  faults during deploy (a bad engine flag, a follower killed, a follower powered off):
     every time the previous release serves again and the new one is marked failed
  E  rollback --to and rollback; old releases pruned to keep_releases
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

API_KEY = "sk-lab-" + "7f3a9c1e5b2d4086"
KEY_ENV = "ASCENDCTL_TEST_API_KEY"
DEPLOY_TIMEOUT = 1200
# A release whose engine starts as slowly as the real one (it loads for about a minute):
# a fault injected a few seconds into its start lands while the deploy waits for it.
SLOW_START = {"ASCENDCTL_STANDIN_START_S": "45"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("dep")).up(nodes=2, engine="standin")
    state = {"lab": lab, "dir": tmp_path_factory.mktemp("deploy"), "releases": {}}
    yield state
    lab.down()


def inventory(cluster, name: str, keep_releases: int = 5, slow_start: bool = False,
              **serving) -> Path:
    """The lab inventory with an API key and the given serving changes."""
    data = yaml.safe_load(Path(cluster["lab"].inventory_path).read_text())
    vars_ = data["all"]["vars"]
    if slow_start:
        serving["env"] = {**vars_["serving"].get("env", {}), **SLOW_START}
    vars_["serving"].update({"api_key": {"env": KEY_ENV}, **serving})
    vars_["deploy"] = {"keep_releases": keep_releases}
    path = cluster["dir"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ascendctl(*args: str, timeout: float = DEPLOY_TIMEOUT) -> subprocess.CompletedProcess:
    env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def start_ascendctl(*args: str) -> subprocess.Popen:
    env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
    return subprocess.Popen([sys.executable, "-m", "ascendctl", *args], text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)


def node_sh(cluster, node: str, script: str, check: bool = True) -> str:
    return cluster["lab"].exec(node, ["sh", "-c", script], check=check).stdout


def head_ip(cluster) -> str:
    return cluster["lab"].nodes[0].mgmt_ip


def http_status(cluster, path: str, key: str | None, body: dict | None = None) -> tuple[int, str]:
    """A request to the head's API sent from the follower node (a real client)."""
    args = ["curl", "-s", "-o", "/tmp/out", "-w", "%{http_code}", "--max-time", "120"]
    if key:
        args += ["-H", f"Authorization: Bearer {key}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    args.append(f"http://{head_ip(cluster)}:8000{path}")
    code = cluster["lab"].exec("node1", args, check=False).stdout.strip()
    return int(code or 0), node_sh(cluster, "node1", "cat /tmp/out", check=False)


def complete(cluster) -> str:
    code, body = http_status(cluster, "/v1/completions", API_KEY,
                             {"model": "tiny", "prompt": "Hello", "max_tokens": 5,
                              "temperature": 0})
    assert code == 200, body
    return json.loads(body)["choices"][0]["text"]


def engine_pid(cluster, node: str) -> int:
    out = node_sh(cluster, node, "systemctl show -p MainPID --value ascendctl-engine")
    return int(out.strip() or 0)


def current_release(cluster, node: str) -> str:
    return node_sh(cluster, node, "readlink /var/lib/ascendctl/current").strip().rsplit("/", 1)[-1]


def history(cluster, inv: Path) -> dict:
    result = ascendctl("history", "-i", str(inv), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def changed_count(report: dict) -> int:
    return sum(counts["changed"] for counts in report["recap"].values())


def engine_start_times(cluster, node: str) -> list[float]:
    """When systemd started the engine unit, from the node's journal."""
    out = node_sh(cluster, node, "journalctl -u ascendctl-engine -o short-unix --no-pager "
                                 "| grep 'Started ascendctl-engine' || true")
    return [float(line.split()[0]) for line in out.splitlines() if line.strip()]


def test_a_first_deploy_serves_through_the_api_key(cluster):
    inv = inventory(cluster, "a")
    junit = cluster["dir"] / "a.xml"
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json", "--junit", str(junit))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    release = report["outcome"]["release_id"]
    cluster["releases"]["a"] = release
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == release
    # what the switch did, in the order it did it (`done`, the run's append-only log)
    done = [(d["kind"], d["subject"]) for d in report["done"]]
    for node in ("node0", "node1"):
        assert done.index(("restart", node)) < done.index(("stopped", node)) \
            < done.index(("units", node)) < done.index(("started", node)) \
            < done.index(("committed", node)), done
    assert done.index(("started", "node0")) < done.index(("started", "node1"))  # rank order
    started = {d["subject"]: d["pid"] for d in report["done"] if d["kind"] == "started"}
    assert started == {n: engine_pid(cluster, n) for n in ("node0", "node1")}

    assert complete(cluster)
    assert http_status(cluster, "/v1/models", None)[0] == 401
    assert http_status(cluster, "/v1/models", "wrong-key")[0] == 401

    status = ascendctl("status", "-i", str(inv), "--json", timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    data = json.loads(status.stdout)
    assert data["verdict"] == "healthy"
    assert [(n["name"], n["release"], n["units"]["ascendctl-engine.service"])
            for n in data["nodes"]] == [("node0", release, "active/running"),
                                        ("node1", release, "active/running")]
    head = data["nodes"][0]
    assert head["engine_up"] is True
    assert head["metrics"]["vllm:generation_tokens_total"] >= 5
    assert "vllm:kv_cache_usage_perc" in head["metrics"]

    # The key appears nowhere but in the 0600 file that holds it.
    texts = {"stdout": result.stdout, "stderr": result.stderr, "junit": junit.read_text(),
             "status": status.stdout, "history": json.dumps(history(cluster, inv))}
    for node in ("node0", "node1"):
        texts[f"{node} journal"] = node_sh(cluster, node, "journalctl --no-pager -o cat")
        texts[f"{node} files"] = node_sh(
            cluster, node, f"grep -rl {API_KEY} /var/lib/ascendctl /etc/systemd/system "
                           "--exclude=secrets.env || true")
        mode = node_sh(cluster, node, f"stat -c %a /var/lib/ascendctl/releases/{release}"
                                      "/secrets.env").strip()
        assert mode == "600"
    leaks = [where for where, text in texts.items() if API_KEY in text]
    assert leaks == []


def test_b_second_deploy_changes_and_restarts_nothing(cluster):
    inv = inventory(cluster, "a")
    pids = {n: engine_pid(cluster, n) for n in ("node0", "node1")}
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert changed_count(report) == 0, report["recap"]
    # nothing restarted, stopped or started; `current` already pointed at the release
    assert {d["kind"] for d in report["done"]} <= {"committed", "settled"}, report["done"]
    assert {d["previous"] for d in report["done"] if d["kind"] == "committed"} <= \
        {cluster["releases"]["a"]}
    assert report["outcome"]["release_id"] == cluster["releases"]["a"]
    assert {n: engine_pid(cluster, n) for n in ("node0", "node1")} == pids


def test_c_changed_setting_new_release_in_rank_order_and_lock(cluster):
    inv_a, inv_c = inventory(cluster, "a"), inventory(cluster, "c", max_num_seqs=4)
    before = time.time()
    running = start_ascendctl("deploy", "-i", str(inv_c), "--yes", "--json")
    deadline = time.time() + 300
    while not node_sh(cluster, "node0", "test -d /var/lib/ascendctl/deploy.lock && echo held "
                                        "|| true").strip():
        assert running.poll() is None, running.communicate()
        assert time.time() < deadline, "the deploy never took the lock"
        time.sleep(1)
    refused = ascendctl("deploy", "-i", str(inv_a), "--yes")
    out, err = running.communicate(timeout=DEPLOY_TIMEOUT)
    assert refused.returncode == 5, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "locked by root@" in refused.stdout + refused.stderr
    assert running.returncode == 0, out[-3000:] + err[-3000:]

    release = json.loads(out)["outcome"]["release_id"]
    assert release != cluster["releases"]["a"]
    cluster["releases"]["c"] = release
    head_start = max(t for t in engine_start_times(cluster, "node0") if t >= before)
    follower_start = max(t for t in engine_start_times(cluster, "node1") if t >= before)
    assert head_start < follower_start
    assert complete(cluster)
    data = history(cluster, inv_c)
    statuses = {r["id"]: r["status"] for r in data["releases"]}
    assert statuses[cluster["releases"]["a"]] == "superseded"
    assert statuses[release] == "active"


def _assert_rolled_back(cluster, result, inv: Path, serving: str) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 6, output[-4000:]
    assert "failed at step" in output and ("node0" in output or "node1" in output)
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == serving
    assert complete(cluster)
    data = history(cluster, inv)
    failed = [r for r in data["releases"] if r["status"] == "failed"]
    assert failed and failed[-1]["id"] != serving
    return failed[-1]["id"]


def test_d1_bad_engine_flag_rolls_back(cluster):
    inv = inventory(cluster, "d1", max_num_seqs=4, extra_args=["--no-such-engine-flag"])
    result = ascendctl("deploy", "-i", str(inv), "--yes")
    _assert_rolled_back(cluster, result, inv, cluster["releases"]["c"])


def _wait_new_engine(cluster, node: str, old_pid: int, process: subprocess.Popen) -> int:
    deadline = time.time() + 600
    while True:
        assert process.poll() is None, process.communicate()
        pid = engine_pid(cluster, node)
        if pid and pid != old_pid:
            return pid
        assert time.time() < deadline, f"no new engine on {node}"
        time.sleep(1)


def test_d2_follower_killed_during_deploy_rolls_back(cluster):
    inv = inventory(cluster, "d2", slow_start=True, max_num_seqs=2)
    old = engine_pid(cluster, "node1")
    running = start_ascendctl("deploy", "-i", str(inv), "--yes")
    new = _wait_new_engine(cluster, "node1", old, running)
    time.sleep(5)  # past the rank's settle time: the deploy is waiting for readiness
    node_sh(cluster, "node1", f"kill -KILL {new}")
    out, err = running.communicate(timeout=DEPLOY_TIMEOUT)
    result = subprocess.CompletedProcess(running.args, running.returncode, out, err)
    _assert_rolled_back(cluster, result, inv, cluster["releases"]["c"])


def test_d3_follower_powered_off_during_deploy_rolls_back(cluster):
    lab = cluster["lab"]
    inv = inventory(cluster, "d3", slow_start=True, max_num_seqs=3)
    old = engine_pid(cluster, "node1")
    running = start_ascendctl("deploy", "-i", str(inv), "--yes")
    _wait_new_engine(cluster, "node1", old, running)
    time.sleep(5)
    lab.fault("node1", "power-off")
    time.sleep(10)
    lab.heal("node1")  # powered back on: the rollback waits for it
    out, err = running.communicate(timeout=DEPLOY_TIMEOUT)
    result = subprocess.CompletedProcess(running.args, running.returncode, out, err)
    assert "unreachable" in out + err or "Connection" in out + err or "lost" in out + err
    _assert_rolled_back(cluster, result, inv, cluster["releases"]["c"])


def test_e_rollback_to_and_back_then_prune(cluster):
    inv = inventory(cluster, "e", keep_releases=2)
    first, second = cluster["releases"]["a"], cluster["releases"]["c"]
    to_first = ascendctl("rollback", "-i", str(inv), "--to", first, "--yes")
    assert to_first.returncode == 0, to_first.stdout[-3000:] + to_first.stderr[-3000:]
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == first
    assert complete(cluster)

    back = ascendctl("rollback", "-i", str(inv), "--yes")
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == second
    assert complete(cluster)

    for node in ("node0", "node1"):
        kept = node_sh(cluster, node, "ls /var/lib/ascendctl/releases").split()
        assert sorted(kept) == sorted([first, second])
    data = history(cluster, inv)
    assert [e["event"] for e in data["events"]][-2:] == ["rollback", "rollback"]
