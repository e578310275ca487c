"""A serving group that heals itself and a status that never lies, on the lab's real engine.

One 2-node lab and one deploy serve the whole module (PP=2, multi-node MP mode, API key);
the tests run in order, each leaving the group serving and stable for the next:

  A  deployed: status healthy, proven by the deep probe; the supervisor serves
  B  Prometheus (the real binary on this host) scrapes the exporters and the head; with
     recovery held, kill -9 of the follower's engine: status is down at once and names
     rank 1, AscendctlServingDown fires; the hold lifted, the group recovers by itself and
     the alert clears; the recovery is an event with its cause and a journal line
  C  kill -9 of the head's engine: down, named, recovered, recorded
  D  the head's engine frozen (SIGSTOP): the probe sees it, the group recovers
  E  the follower powered off: down (unreachable rank 1); powered on, it recovers alone
  F  a rank that fails at every start: N attempts with back-off, then left stopped, and
     status says why; no more starts afterwards
  G  data parallel mode (a redeploy also fixes F's rank): kill -9 of the follower's engine,
     then of the head's, is recovered too

Run under the machine's engine slot: flock /run/lock/ascendctl-engine-slot pytest ...
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab

API_KEY = "sk-lab-" + "health5e1f0a2b"
KEY_ENV = "ASCENDCTL_TEST_API_KEY"
DEPLOY_TIMEOUT = 1200
ENGINE = "ascendctl-engine.service"
# Lab-sized policy: a probe failing 15 s restarts the group; 20 s of serving makes the next
# fault a fresh recovery (attempts reset); short back-off so F's attempts are quick.
HEALTH = {"probe_failure_s": 15, "stable_s": 20, "backoff_s": 5, "max_attempts": 3}
RECOVERY_GUARD_S = 300 + 180      # startup_timeout of the lab inventory + stop/start margin


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("h5hl")).up(nodes=2)
    state = {"lab": lab, "dir": tmp_path_factory.mktemp("health")}
    yield state
    lab.down()


def inventory(cluster, name: str, **serving) -> Path:
    data = yaml.safe_load(Path(cluster["lab"].inventory_path).read_text())
    data["all"]["vars"]["serving"].update({"api_key": {"env": KEY_ENV}, "health": HEALTH,
                                           **serving})
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
    wait_serving_and_stable(cluster)
    assert_recovered_event(cluster, before, node, rank, cause)
    return data


def test_a_deployed_group_is_healthy_by_the_deep_probe(cluster):
    cluster["inv"] = inventory(cluster, "mp")
    result = ascendctl("deploy", "-i", str(cluster["inv"]), "--yes", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    code, data = status(cluster)
    assert code == 0 and data["verdict"] == "healthy", data["reasons"]
    assert data["serving"]["ok"] is True
    assert data["supervisor"]["running"] and data["supervisor"]["phase"] == "serving"
    assert [u["state"] for n in data["nodes"] for u in n["engine"]] == ["running", "running"]
    for node in ("node0", "node1"):
        # engine units never start on their own at boot: the supervisor starts the group
        assert node_sh(cluster, node, f"systemctl is-enabled {ENGINE} || true").strip() \
            in ("static", "disabled")
        assert node_sh(cluster, node, "systemctl is-enabled ascendctl-exporter").strip() \
            == "enabled"
    # a foreign process holding HBM is named (it serves: degraded), and healed
    cluster["lab"].fault("node1", "hbm-leftover", "2")
    code, data = status(cluster)
    assert code == 3 and data["verdict"] == "degraded"
    assert any(r.startswith("rank 1 (node1): NPU 2 HBM held by PID") and "not the engine" in r
               for r in data["reasons"]), data["reasons"]
    cluster["lab"].heal("node1")
    assert status(cluster)[0] == 0


# -- Prometheus --------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def prometheus(cluster, tmp_path):
    from ascendctl.load import load_inventory
    from ascendctl.render.files import write_files
    from ascendctl.render.prometheus import prometheus_files

    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert os.path.exists(binary), "prometheus missing: apt-get install prometheus " \
                                   "(scripts/bootstrap does)"
    inv = load_inventory(cluster["inv"])
    write_files(tmp_path, prometheus_files(inv, scrape_interval="2s", evaluation_interval="2s"))
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus' / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        wait_for("prometheus up", lambda: _get(f"{api}/status/runtimeinfo"), guard_s=60, every=1)
        yield api
    finally:
        process.terminate()
        process.wait(timeout=30)


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except (OSError, ValueError, urllib.error.URLError):
        return None


def alert_state(api: str, name: str) -> str | None:
    answer = _get(f"{api}/alerts") or {}
    states = [a["state"] for a in answer.get("data", {}).get("alerts", [])
              if a["labels"].get("alertname") == name]
    return states[0] if states else None


def query(api: str, expr: str) -> list[dict]:
    answer = _get(f"{api}/query?query={urllib.request.quote(expr)}") or {}
    return answer.get("data", {}).get("result", [])


def test_serving_down_fires_while_a_rank_is_dead_and_clears_after_recovery(cluster, prometheus):
    api = prometheus
    wait_for("every target scraped", lambda: len([r for r in query(api, "up == 1")]) == 3,
             guard_s=60)
    wait_for("serving_up 1", lambda: [r["value"][1] for r in query(api, "ascendctl_serving_up")]
             == ["1"], guard_s=60)
    assert alert_state(api, "AscendctlServingDown") is None
    before = len(recovery_events(cluster))
    # hold recovery (as a deploy would) so that the group stays down longer than `for: 1m`
    hold = json.dumps({"until": time.time() + 900, "by": "test_health_lab", "reason": "alert"})
    node_sh(cluster, "node0", f"echo '{hold}' > /var/lib/ascendctl/supervisor.hold")
    pid = engine_pid(cluster, "node1")
    node_sh(cluster, "node1", f"kill -KILL {pid}")
    code, data = status(cluster)
    assert_down_naming(code, data, "node1", 1)
    assert any("held by test_health_lab" in r for r in data["reasons"])
    wait_for("AscendctlServingDown firing",
             lambda: alert_state(api, "AscendctlServingDown") == "firing", guard_s=180)
    assert new_events(cluster, before) == []            # held: nothing was restarted
    node_sh(cluster, "node0", "rm -f /var/lib/ascendctl/supervisor.hold")
    wait_serving_and_stable(cluster)
    wait_for("AscendctlServingDown cleared",
             lambda: alert_state(api, "AscendctlServingDown") is None, guard_s=120)
    assert_recovered_event(cluster, before, "node1", 1, "crashed")
    starts = query(api, 'ascendctl_engine_starts_total{node="node1"}')
    assert starts and float(starts[0]["value"][1]) >= 1


def test_kill_of_the_heads_engine_is_recovered(cluster):
    kill_and_recover(cluster, "node0", 0, "KILL", "crashed")


def test_a_frozen_head_is_found_by_the_probe_and_recovered(cluster):
    before = len(recovery_events(cluster))
    pid = engine_pid(cluster, "node0")
    node_sh(cluster, "node0", f"kill -STOP {pid}")
    code, data = status(cluster)
    # /health may still answer: only the completion tells
    assert data["verdict"] == "down" and code == 1
    assert any("no completion from node0" in r for r in data["reasons"]), data["reasons"]
    wait_serving_and_stable(cluster)
    events = new_events(cluster, before)
    assert events[0]["stage"] == "started" and "serving probe failed" in events[0]["cause"]


def test_a_powered_off_follower_is_down_and_recovers_when_it_is_back(cluster):
    before = len(recovery_events(cluster))
    lab = cluster["lab"]
    lab.fault("node1", "power-off")
    code, data = status(cluster)
    assert data["verdict"] == "down" and code == 4
    assert any(r.startswith("rank 1 (node1) unreachable") for r in data["reasons"])
    wait_for("recovery waits for node1", lambda: any(
        "node1 (unreachable)" in w for w in supervisor(cluster).get("waiting_for") or []),
        guard_s=120)
    lab.heal("node1")          # powered on: its agent starts at boot, nobody else acts
    wait_serving_and_stable(cluster)
    events = new_events(cluster, before)
    assert events[0]["stage"] == "started" and "node1" in events[0]["cause"]


def test_a_rank_that_fails_every_start_is_left_stopped_with_the_reason(cluster):
    before = len(recovery_events(cluster))
    engine_json = "/var/lib/ascendctl/current/engine.json"
    config = json.loads(node_sh(cluster, "node1", f"cat {engine_json}"))
    config["argv"].append("--no-such-engine-flag")
    cluster["lab"].exec("node1", ["sh", "-c", f"cat > {engine_json}"], input=json.dumps(config))
    node_sh(cluster, "node1", f"kill -KILL {engine_pid(cluster, 'node1')}")
    wait_for("gave up", lambda: supervisor(cluster).get("phase") == "gave-up", guard_s=900)
    code, data = status(cluster)
    assert code == 1 and data["verdict"] == "down"
    assert data["reasons"][0].startswith("recovery gave up: 3 attempt(s) failed")
    assert "unrecognized arguments: --no-such-engine-flag" in data["reasons"][0]
    stages = [e["stage"] for e in new_events(cluster, before)]
    assert stages == ["started", "attempt-failed", "retry", "attempt-failed", "retry",
                      "attempt-failed", "gave-up"]
    retries = [e["backoff_s"] for e in new_events(cluster, before) if e["stage"] == "retry"]
    assert retries == [5.0, 10.0]
    starts = node_sh(cluster, "node1", f"journalctl -u {ENGINE} -o cat --no-pager | "
                                       "grep -c 'ascendctl-launcher: starting rank 1'").strip()
    time.sleep(30)               # no restart storm: nothing starts any more
    later = node_sh(cluster, "node1", f"journalctl -u {ENGINE} -o cat --no-pager | "
                                      "grep -c 'ascendctl-launcher: starting rank 1'").strip()
    assert later == starts
    assert node_sh(cluster, "node1", f"systemctl is-active {ENGINE} || true").strip() != "active"


def test_data_parallel_group_recovers_a_killed_follower_and_head(cluster):
    cluster["inv"] = inventory(cluster, "dp", mode="dp", tensor_parallel_size=1,
                               pipeline_parallel_size=1, data_parallel_size=2,
                               data_parallel_size_local=1, api_server_count=1,
                               data_parallel_rpc_port=13389)
    result = ascendctl("deploy", "-i", str(cluster["inv"]), "--yes")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wait_for("healthy", lambda: status(cluster)[0] == 0, guard_s=120)
    kill_and_recover(cluster, "node1", 1, "KILL", "crashed")
    kill_and_recover(cluster, "node0", 0, "KILL", "crashed")
