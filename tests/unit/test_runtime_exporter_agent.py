"""The exporter as the node agent's HTTP face: engine-state and supervisor metrics (checked
by promtool), /health/state, and /health/plan served only while the supervisor keeps it
fresh. A real HTTP server on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import pytest

from ascendctl_runtime import gangplan, healthstore, layout
from ascendctl_runtime.exporter import (
    Collector, Metrics, make_handler, render_agent_metrics, render_supervisor_metrics,
)
from ascendctl_runtime.npu import CachedReader
from tests.unit.health_sim import TOKEN, UNIT, Clock, FakeSystemd
from tests.unit.test_runtime_exporter import sample

SNAPSHOT = {
    "units": {UNIT: {"state": "running", "since": 1796120015.0}},
    "starts": {UNIT: 2},
    "npu": {"ok": True, "processes": [{"npu": 0, "pid": 741, "engine": True, "mem_mb": 50000},
                                      {"npu": 3, "pid": 4242, "engine": False, "mem_mb": 59017}],
            "foreign": [{"npu": 3, "pid": 4242, "engine": False, "mem_mb": 59017}]},
}


def test_agent_metrics_say_what_the_engine_does_and_who_holds_the_npus():
    metrics = Metrics()
    render_agent_metrics(metrics, SNAPSHOT)
    text = metrics.text()
    assert sample(text, "ascendctl_engine_up", unit=UNIT) == 1
    assert sample(text, "ascendctl_engine_state", unit=UNIT, state="running") == 1
    assert sample(text, "ascendctl_engine_state", unit=UNIT, state="crashed") == 0
    assert sample(text, "ascendctl_engine_start_time_seconds", unit=UNIT) == 1796120015.0
    assert sample(text, "ascendctl_engine_starts_total", unit=UNIT) == 2
    assert sample(text, "ascendctl_npu_foreign_processes") == 1
    assert sample(text, "ascendctl_npu_foreign_hbm_bytes") == 59017 * 2**20


@pytest.mark.parametrize("phase,ok,serving", [("serving", True, 1), ("serving", False, 0),
                                              ("warming", True, 0), ("gave-up", False, 0)])
def test_serving_up_is_the_deep_probe_of_a_serving_group(phase, ok, serving):
    metrics = Metrics()
    state = {"phase": phase, "probe": {"ok": ok, "seconds": 0.05}, "attempt": 1,
             "recoveries_total": 3, "generation": 7}
    render_supervisor_metrics(metrics, state, age_s=1.0, fresh_s=30.0)
    text = metrics.text()
    assert sample(text, "ascendctl_supervisor_up") == 1
    assert sample(text, "ascendctl_serving_up") == serving
    assert sample(text, "ascendctl_group_gave_up") == int(phase == "gave-up")
    assert sample(text, "ascendctl_group_recovering") == int(phase == "warming")


def test_a_stale_supervisor_state_proves_nothing():
    metrics = Metrics()
    render_supervisor_metrics(metrics, {"phase": "serving", "probe": {"ok": True}},
                              age_s=120.0, fresh_s=30.0)
    text = metrics.text()
    assert sample(text, "ascendctl_supervisor_up") == 0
    assert "ascendctl_serving_up" not in text


def test_promtool_accepts_the_agent_and_supervisor_exposition():
    metrics = Metrics()
    render_agent_metrics(metrics, SNAPSHOT)
    render_supervisor_metrics(metrics, {"phase": "serving", "probe": {"ok": True, "seconds": 1},
                                        "held": None}, age_s=1.0, fresh_s=30.0)
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/bootstrap does)"
    result = subprocess.run([promtool, "check", "metrics"], input=metrics.text(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture()
def served(tmp_path):
    from ascendctl_runtime.agent import Agent, AgentConfig

    clock = Clock()
    systemd = FakeSystemd(clock, [UNIT])
    systemd.run("start", UNIT)
    config = AgentConfig(cluster="c", node="node0", rank=0, release="r-1", root=str(tmp_path),
                         units=[UNIT], plan_url="-", is_head=True, plan_ttl_s=30.0)
    agent = Agent(config, systemd=systemd, npu_table=lambda: ([], ""), clock=clock,
                  boot=lambda: "b", token=TOKEN)
    reader = CachedReader(read=lambda: (None, "npu-smi: not found"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Collector(5.0, reader, agent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def test_health_state_and_metrics_over_http(served):
    base, _root = served
    code, body = get(base + "/health/state")
    state = json.loads(body)
    assert code == 200 and state["node"] == "node0" and state["release"] == "r-1"
    assert state["units"][UNIT]["state"] == "running"
    code, body = get(base + "/metrics")
    assert code == 200 and b'ascendctl_engine_up{unit="ascendctl-engine.service"} 1' in body
    assert b"ascendctl_supervisor_up 0" in body     # no supervisor state yet


def test_the_plan_is_served_only_while_fresh(served):
    base, root = served
    assert get(base + "/health/plan")[0] == 404
    plan = gangplan.Plan(cluster="c", release="r-1", generation=3, action="stop")
    path = healthstore.health_path(str(root), layout.PLAN_FILE)
    healthstore.write_json(path, gangplan.sign(plan, TOKEN))
    code, body = get(base + "/health/plan")
    assert code == 200 and gangplan.verify(json.loads(body), TOKEN).generation == 3
    old = time.time() - 120
    os.utime(path, (old, old))          # the supervisor stopped updating it
    assert get(base + "/health/plan")[0] == 404
