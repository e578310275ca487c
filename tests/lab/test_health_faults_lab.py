"""The gang supervisor's fault matrix, on the lab's stand-in engine.

The subject is the orchestration (what the supervisor sees, decides and records; what
status says), not the engine, so the group runs the lab's stand-in for `vllm serve`
(docs/lab.md): it starts in seconds and dies with its gang as vLLM does. The real engine's
end-to-end tests of the same capabilities are in test_health_lab.py (B: kill -> recovery,
G: data-parallel recovery). One 2-node lab and one deploy (PP=2, multi-node MP mode, API
key) serve the whole module; the tests run in order, each leaving the group serving and
stable for the next:

  C  kill -9 of the head's engine: down, named, recovered, recorded
  D  the head's engine frozen (SIGSTOP): the probe sees it, the group recovers
  E  the follower powered off: down (unreachable rank 1); powered on, it recovers alone
  F  a rank that fails at every start: N attempts with back-off, then left stopped, and
     status says why; no more starts afterwards
"""

from __future__ import annotations

import json
import time

import pytest

from tests.lab.health_helpers import (
    ENGINE, deploy, engine_pid, kill_and_recover, lab_cluster, new_events, node_sh,
    recovery_events, status, supervisor, wait_for, wait_serving_and_stable,
)

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with lab_cluster(tmp_path_factory, "h5hf", engine="standin") as state:
        deploy(state, "mp")
        wait_serving_and_stable(state)
        yield state


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
