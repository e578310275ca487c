"""A serving group that heals itself and a status that never lies, on the lab's real engine.

The engine suite's shared lab (`gang`, tests/conftest.py) and one deploy serve the module
(PP=2, multi-node MP mode, API key, the lab-sized health policy); the tests run in order,
each leaving the group serving and stable for the next, and for test_bench_lab.py after it:

  A  deployed: status healthy, proven by the deep probe; the supervisor serves
  B  Prometheus (the real binary on this host) scrapes the exporters and the head; with
     recovery held, kill -9 of the follower's engine: status is down at once and names
     rank 1, AscendctlServingDown fires; the hold lifted, the group recovers by itself and
     the alert clears; the recovery is an event with its cause and a journal line (the
     real engine's test of kill -> recovery)

Data-parallel recovery on the real engine is test_health_dp_lab.py (the same lab, later).
The rest of the fault matrix (the head killed, a frozen head, a powered-off follower, a
rank failing every start) is about the supervisor's orchestration, not the engine: it
runs on the lab's stand-in engine in test_health_faults_lab.py.

Run under the machine's engine slot: flock /run/lock/ascendctl-engine-slot pytest ...
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import free_port
from tests.lab.health_helpers import (
    ENGINE, assert_down_naming, assert_recovered_event, deploy, engine_pid, new_events, node_sh,
    recovery_events, status, wait_for, wait_serving_and_stable,
)

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def cluster(gang):
    return gang


def test_a_deployed_group_is_healthy_by_the_deep_probe(cluster):
    deploy(cluster, "mp")
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

@pytest.fixture()
def prometheus(cluster, tmp_path):
    from ascendctl.load import load_inventory
    from ascendctl.render.files import write_files
    from ascendctl.render.prometheus import RULES_FILE, prometheus_files

    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert os.path.exists(binary), "prometheus missing: apt-get install prometheus " \
                                   "(scripts/bootstrap does)"
    inv = load_inventory(cluster["inv"])
    write_files(tmp_path, prometheus_files(inv, scrape_interval="2s", evaluation_interval="2s"))
    # The rendered rule waits `for: 1m` before it fires (tests/unit check the rendered
    # rules with promtool); this copy waits 10 s, so the test spends its time on the firing
    # and the clearing, not on a minute of a dead rank.
    rules = tmp_path / "prometheus" / RULES_FILE
    rendered = rules.read_text()
    shortened = re.sub(r"(- alert: AscendctlServingDown\n(?:[^\n]*\n)*?\s+for: )1m\n",
                       r"\g<1>10s\n", rendered, count=1)
    assert shortened != rendered, "AscendctlServingDown has no `for: 1m` to shorten"
    rules.write_text(shortened)
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
