"""What the gang-health lab modules share: their lab and deploy, the inventory with the
lab-sized health policy, and the polls and assertions on status, events and the journal
(test_health_lab.py on the real engine, test_health_faults_lab.py on the stand-in)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import require_lab, unique_lab_name

API_KEY = "sk-lab-" + "health5e1f0a2b"
KEY_ENV = "ASCENDCTL_TEST_API_KEY"
DEPLOY_TIMEOUT = 1200
ENGINE = "ascendctl-engine.service"
# Lab-sized policy: a probe failing 15 s restarts the group; 5 s of serving (one probe
# interval) makes the next fault a fresh recovery (attempts reset), so a test waits that
# long after each recovery; short back-off so the give-up test is quick (over the lab
# inventory's own health settings).
HEALTH = {"probe_failure_s": 15, "stable_s": 5, "backoff_s": 5, "max_attempts": 3}
RECOVERY_GUARD_S = 300 + 180      # startup_timeout of the lab inventory + stop/start margin


@contextlib.contextmanager
def lab_cluster(tmp_path_factory, prefix: str, engine: str = "host"):
    """A module's 2-node lab, down again when the block ends."""
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name(prefix)).up(nodes=2, engine=engine)
    try:
        yield {"lab": lab, "dir": tmp_path_factory.mktemp("health")}
    finally:
        lab.down()


def inventory(cluster, name: str, **serving) -> Path:
    data = yaml.safe_load(Path(cluster["lab"].inventory_path).read_text())
    vars_serving = data["all"]["vars"]["serving"]
    vars_serving.update({"api_key": {"env": KEY_ENV},
                         "health": {**vars_serving.get("health", {}), **HEALTH}, **serving})
    path = cluster["dir"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ascendctl(*args: str, timeout: float = DEPLOY_TIMEOUT) -> subprocess.CompletedProcess:
    env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def node_sh(cluster, node: str, script: str, check: bool = True) -> str:
    return cluster["lab"].exec(node, ["sh", "-c", script], check=check).stdout


def status(cluster) -> tuple[int, dict]:
    result = ascendctl("status", "-i", str(cluster["inv"]), "--json", timeout=120)
    return result.returncode, json.loads(result.stdout)


def completes(cluster, timeout: float = 30) -> bool:
    """A real completion through the API key, from this host (the lab bridge)."""
    url = f"http://{cluster['lab'].nodes[0].mgmt_ip}:8000/v1/completions"
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 2,
                       "temperature": 0}).encode()
    request = urllib.request.Request(url, data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return bool(json.load(response)["choices"])
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return False


def wait_for(what: str, predicate, guard_s: float = RECOVERY_GUARD_S, every: float = 2.0):
    """Poll until predicate() is true; the guard only fails a test that would hang."""
    deadline = time.monotonic() + guard_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {guard_s:.0f} s"
        time.sleep(every)


def supervisor(cluster) -> dict:
    return status(cluster)[1].get("supervisor") or {}


def wait_serving_and_stable(cluster) -> None:
    """Serving without anyone's help, and stable again (the next fault is a first attempt)."""
    wait_for("serving again", lambda: completes(cluster))
    wait_for("stable", lambda: (lambda s: s.get("phase") == "serving" and s.get("attempt") == 0)(
        supervisor(cluster)), guard_s=180)


def deploy(cluster, name: str, **serving) -> dict:
    """Deploy the inventory NAME (the cluster's from now on); the deploy's JSON report."""
    cluster["inv"] = inventory(cluster, name, **serving)
    result = ascendctl("deploy", "-i", str(cluster["inv"]), "--yes", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


def engine_pid(cluster, node: str) -> int:
    """The engine itself: the launcher's child (the process `vllm serve` runs as)."""
    main = node_sh(cluster, node, f"systemctl show -p MainPID --value {ENGINE}").strip()
    child = node_sh(cluster, node, f"pgrep -P {main} | head -1", check=False).strip()
    assert child, f"no engine process under the launcher on {node}"
    return int(child)


def recovery_events(cluster) -> list[dict]:
    result = ascendctl("events", "-i", str(cluster["inv"]), "--kind", "recovery", "--json",
                       timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["events"]


def new_events(cluster, before: int) -> list[dict]:
    return recovery_events(cluster)[before:]


def assert_down_naming(code: int, data: dict, node: str, rank: int) -> None:
    assert data["verdict"] != "healthy" and code != 0, data["reasons"]
    assert any(f"rank {rank} ({node})" in reason for reason in data["reasons"]), data["reasons"]


def assert_recovered_event(cluster, before: int, node: str, rank: int, cause: str) -> None:
    events = new_events(cluster, before)
    stages = [e["stage"] for e in events]
    assert stages[:1] == ["started"] and "recovered" in stages, events
    started = events[0]
    assert (started["node"], started["rank"]) == (node, rank), started
    assert cause in started["cause"], started
    journal = node_sh(cluster, "node0", "journalctl -u ascendctl-supervisor -o cat --no-pager")
    assert f"recovery started: generation={started['generation']}" in journal


def kill_and_recover(cluster, node: str, rank: int, signal: str, cause: str) -> dict:
    before = len(recovery_events(cluster))
    pid = engine_pid(cluster, node)
    node_sh(cluster, node, f"kill -{signal} {pid}")
    code, data = status(cluster)
    assert_down_naming(code, data, node, rank)
    # The supervisor must have seen the death before "serving and stable" means recovered:
    # a data-parallel head keeps answering on its live rank, and the supervisor's next poll
    # may come after the first serving check.
    wait_for("the supervisor starts a recovery", lambda: new_events(cluster, before),
             guard_s=120)
    wait_serving_and_stable(cluster)
    assert_recovered_event(cluster, before, node, rank, cause)
    return data
