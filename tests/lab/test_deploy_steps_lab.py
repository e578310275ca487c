"""The deploy's steps are YAML an operator extends, and its lock holds, on the lab with its
stand-in engine: the subject is the orchestration (where a step runs, what a failing step
restores, who holds the lock), so the nodes run the lab's stand-in for `vllm serve`
(docs/lab.md), which starts in seconds; the real engine's end-to-end deploy and rollback
tests are test_engine_deploy_lab.py, test_bench_lab.py and test_replicas_lab.py
(with the quality gate's). One 2-node lab; the tests run in order, each from the state the
previous one left:

  A  a first deploy (the baseline release)
  B  a task inserted into a copy of switch.yaml (next to a copy of deploy.yaml) between
     the head's start and the followers' start runs exactly there (its log line falls
     between the engines' start lines in the nodes' journals)
  C  a failing task inserted after the readiness gate: exit 6 naming the task and the
     node, the previous release serves again, the new one is marked failed
  D  the lock: `--force-unlock` against a live deploy is refused; once that deploy's
     heartbeat is stale it works, and the old holder stops before touching the engines
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

DEPLOY_TIMEOUT = 1200
ROOT = "/var/lib/ascendctl"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("h1st")).up(nodes=2, engine="standin")
    state = {"lab": lab, "dir": tmp_path_factory.mktemp("steps"), "releases": {}}
    yield state
    lab.down()


def inventory(cluster, name: str, **serving) -> Path:
    data = yaml.safe_load(Path(cluster["lab"].inventory_path).read_text())
    data["all"]["vars"]["serving"].update(serving)
    path = cluster["dir"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def playbook_with(cluster, name: str, after_play: str, plays: list[dict]) -> Path:
    """A copy of the packaged deploy.yaml with PLAYS inserted after the play AFTER_PLAY: a
    play of deploy.yaml's own, or one of the switch's (switch.yaml, imported into its
    `rolling:` block and repeated per serving group) — then in an edited copy of switch.yaml
    next to the playbook's copy, where the import looks first."""
    from ascendctl.paths import playbooks_dir

    out = cluster["dir"] / f"{name}-playbook"
    out.mkdir()
    for file in ("deploy.yaml", "switch.yaml"):
        book = yaml.safe_load((playbooks_dir() / file).read_text())
        index = next((i for i, play in enumerate(book) if play.get("name") == after_play),
                     None)
        if index is not None:
            book[index + 1:index + 1] = plays
            (out / file).write_text(yaml.safe_dump(book, sort_keys=False))
            break
    else:
        raise AssertionError(f"no play {after_play!r} in deploy.yaml or switch.yaml")
    if not (out / "deploy.yaml").exists():
        shutil.copy(playbooks_dir() / "deploy.yaml", out / "deploy.yaml")
    return out / "deploy.yaml"


def ascendctl(*args: str, timeout: float = DEPLOY_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "ASCENDCTL_PLAIN": "1"})


def start_ascendctl(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ascendctl", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env={**os.environ, "ASCENDCTL_PLAIN": "1"})


def node_sh(cluster, node: str, script: str) -> str:
    return cluster["lab"].exec(node, ["sh", "-c", script], check=False).stdout


def current_release(cluster, node: str) -> str:
    return node_sh(cluster, node, f"readlink {ROOT}/current").strip().rsplit("/", 1)[-1]


def engine_pid(cluster, node: str) -> int:
    return int(node_sh(cluster, node, "systemctl show -p MainPID --value ascendctl-engine")
               .strip() or 0)


def journal_times(cluster, node: str, *args: str, grep: str) -> list[float]:
    out = node_sh(cluster, node, "journalctl -o short-unix --no-pager " + " ".join(args)
                  + f" | grep -F '{grep}' || true")
    return [float(line.split()[0]) for line in out.splitlines() if line.strip()]


def completes(cluster) -> str:
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 4, "temperature": 0})
    out = cluster["lab"].exec("node1", [
        "curl", "-s", "--max-time", "120", "-H", "Content-Type: application/json", "-d", body,
        f"http://{cluster['lab'].nodes[0].mgmt_ip}:8000/v1/completions"]).stdout
    return json.loads(out)["choices"][0]["text"]


def history(cluster, inv: Path) -> dict:
    result = ascendctl("history", "-i", str(inv), "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_first_deploy(cluster):
    inv = inventory(cluster, "a")
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cluster["releases"]["a"] = json.loads(result.stdout)["outcome"]["release_id"]


def test_b_a_task_inserted_between_the_head_and_the_followers_runs_there(cluster):
    marker = f"h1-between-{os.getpid()}"
    book = playbook_with(cluster, "b", "start the head", [{
        "name": "mark the journals between the head's start and the followers'",
        "hosts": "all", "any_errors_fatal": True,
        "tasks": [{"name": "log a line", "command": ["logger", "-t", "h1-steps", marker],
                   "when": "release.restart"}]}])
    inv = inventory(cluster, "b", max_num_seqs=4)
    before = time.time()
    result = ascendctl("deploy", "-i", str(inv), "--playbook", str(book), "--yes", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    release = json.loads(result.stdout)["outcome"]["release_id"]
    assert release != cluster["releases"]["a"]
    cluster["releases"]["b"] = release

    started = "Started ascendctl-engine"
    head = [t for t in journal_times(cluster, "node0", "-u", "ascendctl-engine", grep=started)
            if t >= before]
    follower = [t for t in journal_times(cluster, "node1", "-u", "ascendctl-engine",
                                         grep=started) if t >= before]
    marks = {n: journal_times(cluster, n, "-t", "h1-steps", grep=marker)
             for n in ("node0", "node1")}
    assert len(head) == len(follower) == 1 and all(len(m) == 1 for m in marks.values())
    assert head[0] < marks["node0"][0] < follower[0]
    assert head[0] < marks["node1"][0] < follower[0]
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == release
    assert completes(cluster)


def test_c_a_failing_task_after_readiness_restores_the_previous_release(cluster):
    book = playbook_with(cluster, "c", "readiness gate", [{
        "name": "my own probe", "hosts": "all", "any_errors_fatal": True,
        "tasks": [{"name": "my probe says no", "when": "inventory_hostname == 'node1'",
                   "command": ["sh", "-c", "echo my probe failed >&2; exit 3"]}]}])
    inv = inventory(cluster, "c", max_num_seqs=3)
    serving = cluster["releases"]["b"]
    result = ascendctl("deploy", "-i", str(inv), "--playbook", str(book), "--yes", "--json")
    output = result.stdout + result.stderr
    assert result.returncode == 6, output[-4000:]
    report = json.loads(result.stdout)
    assert report["outcome"]["failed_step"] == "my probe says no"
    assert report["outcome"]["failed_node"] == "node1"
    assert report["outcome"]["rolled_back_to"] == serving
    assert "failed at step 'my probe says no' on node1" in report["summary"]
    failed = report["outcome"]["release_id"]
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == serving
    assert completes(cluster)
    releases = {r["id"]: r for r in history(cluster, inv)["releases"]}
    assert releases[failed]["status"] == "failed"
    assert "my probe says no on node1" in releases[failed]["failure"]
    assert releases[serving]["status"] == "active"


def _wait(predicate, what: str, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert process.poll() is None, (what, process.communicate())
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_d_force_unlock_refuses_a_live_lock_and_breaks_a_stale_one(cluster):
    serving = cluster["releases"]["b"]
    inv_b = inventory(cluster, "b", max_num_seqs=4)        # what serves: a no-op deploy
    # The holder: a real deploy of a changed setting that pauses before the stop.
    book = playbook_with(cluster, "d", "weights", [{
        "name": "a slow step before the switch", "hosts": "all", "any_errors_fatal": True,
        "tasks": [{"name": "wait a while", "command": ["sleep", "25"]}]}])
    inv_d = inventory(cluster, "d", max_num_seqs=2)
    pids = {n: engine_pid(cluster, n) for n in ("node0", "node1")}
    holder = start_ascendctl("deploy", "-i", str(inv_d), "--playbook", str(book), "--yes",
                             "--json")
    _wait(lambda: "sleep 25" in node_sh(cluster, "node0", "ps -eo args"),
          "the holder's slow step", holder)

    refused = ascendctl("deploy", "-i", str(inv_b), "--yes", "--force-unlock")
    assert refused.returncode == 5, refused.stdout[-3000:] + refused.stderr[-3000:]
    said = refused.stdout + refused.stderr
    assert "that deploy is alive" in said and "--really" in said
    assert node_sh(cluster, "node0", f"test -d {ROOT}/deploy.lock && echo held").strip()

    # The holder hangs (a laptop suspended mid-deploy): its heartbeat goes stale.
    holder.send_signal(signal.SIGSTOP)
    try:
        old = int(time.time()) - 2000
        node_sh(cluster, "node0", f"touch -d @{old} {ROOT}/deploy.lock/heartbeat")
        broke = ascendctl("deploy", "-i", str(inv_b), "--yes", "--force-unlock", "--json")
        assert broke.returncode == 0, broke.stdout[-3000:] + broke.stderr[-3000:]
        report = json.loads(broke.stdout)
        assert report["outcome"]["lock_broken"]["holder"].startswith("root@")
        assert sum(c["changed"] for c in report["recap"].values()) == 0
    finally:
        holder.send_signal(signal.SIGCONT)
    out, err = holder.communicate(timeout=DEPLOY_TIMEOUT)
    assert holder.returncode == 5, out[-3000:] + err[-3000:]
    summary = json.loads(out)
    assert "taken over" in summary["summary"] and "not touched" in summary["summary"]
    assert summary["outcome"]["engines_touched"] is False
    after_stop = [p for p in summary["plays"]][[p["name"] for p in summary["plays"]]
                                              .index("a slow step before the switch") + 1:]
    assert not [t["name"] for p in after_stop for t in p["tasks"]
                if any(r["status"] == "changed" for r in t["hosts"].values())]
    assert not [p["name"] for p in summary["plays"]
                if p["name"].startswith("restore the release the group served before")]
    assert {n: engine_pid(cluster, n) for n in ("node0", "node1")} == pids
    assert current_release(cluster, "node0") == current_release(cluster, "node1") == serving
    assert not node_sh(cluster, "node0", f"test -d {ROOT}/deploy.lock && echo held").strip()
    events = [e for e in history(cluster, inv_b)["events"] if e["event"] == "lock-broken"]
    assert events and events[-1]["stale"] is True
    assert completes(cluster)
