"""The controller-node contract (runtime/ascendctl_runtime/contract.py): every config type
round-trips through its one to_json / from_json, and a malformed file is one clear error
naming the file and the key — in the loader and in the node programs that read it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from ascendctl.paths import runtime_dir
from ascendctl_runtime import healthstore, layout
from ascendctl_runtime.contract import (
    RELEASE_CONFIGS, AgentConfig, FaultsConfig, GatewayConfig, GatewayGroup, Hold, LaunchConfig,
    RankSpec, SupervisorConfig, WatchdogConfig,
)
from ascendctl_runtime.faults.policy import load_policy, table_to_dict
from ascendctl_runtime.typedjson import ContractError

RUNTIME_PARENT = str(runtime_dir().parent)

LAUNCH = LaunchConfig(kind="ray", argv=["ray", "start", "--block"], env_file="/r/engine.env",
                      secrets_file="/r/secrets.env", cluster="c", node="node1", rank=1, headless=True,
                      mode="ray", release="r-1", release_dir="/r", cpus="0-3,8",
                      numa_node=1, startup_timeout_s=900.0, stop_grace_seconds=45.5,
                      data_parallel_ranks=[2, 3], ready_url="http://127.0.0.1:8000/v1/models",
                      workdir="/tmp")
WATCHDOG = WatchdogConfig(unit=layout.RAY_UNIT, threshold=0.9, interval_seconds=2.5,
                          consecutive=4, startup_grace_seconds=60.0, cooldown_seconds=70.0,
                          request_file="/root/health/restart-request.json")
AGENT = AgentConfig(cluster="c", node="node0", rank=0, release="r-1", root="/root",
                    units=[layout.RAY_UNIT, layout.ENGINE_UNIT], plan_url="http://h:9101/p",
                    secrets_file="/r/secrets.env", coordination_port=6379, is_head=True,
                    interval_s=1.5, stop_grace_s=7.0, plan_ttl_s=12.0, npu_cache_s=0.5)
RANKS = [RankSpec(node="node0", rank=0, state_url="http://a:9101/health/state",
                  units=(layout.RAY_UNIT, layout.ENGINE_UNIT)),
         RankSpec(node="node1", rank=1, state_url="http://b:9101/health/state",
                  units=(layout.RAY_UNIT,))]
SUPERVISOR = SupervisorConfig(
    cluster="c", release="r-1", root="/root", ranks=RANKS,
    steps=[("node0", layout.RAY_UNIT), ("node0", layout.ENGINE_UNIT), ("node1", layout.RAY_UNIT)],
    probe_port=8000, probe_model="m", secrets_file="/r/secrets.env", head_node="node0",
    probe_interval_s=1.0, probe_timeout_s=2.0, probe_failure_s=3.0, startup_timeout_s=4.0,
    rank_start_wait_s=5.0, settle_s=6.0, max_attempts=7, backoff_s=8.0, backoff_max_s=9.0,
    stop_timeout_s=10.0, npu_free_timeout_s=11.0, stable_s=12.0, tick_s=13.0,
    state_timeout_s=14.0, group="replica1", gateway_state_url="http://g:9101/health/gateway",
    drain_timeout_s=15.0)
GATEWAY = GatewayConfig(
    cluster="c", root="/root", site_path="/etc/nginx/conf.d/ascendctl-c.conf",
    groups=[GatewayGroup(name="replica0", health_url="http://a:8000/health",
                         nodes=("node0",), state_urls=("http://a:9101/health/state",))],
    interval_s=1.0, state_timeout_s=0.5)
HOLD = Hold(until=1796125000.25, by="root@jump", reason="deploy r-ade405ce9226")
FAULTS = FaultsConfig(cluster="c", node="node1", root="/root", npus=[0, 1, 2], ports=[0, 1],
                      policy=table_to_dict(load_policy()), serving_groups=2, interval_s=5.0,
                      log_globs=["/var/log/x/*.log"], engine_metrics_url="http://127.0.0.1:8000/metrics",
                      command_timeout_s=4.0, events_kept=50)
EVERY_TYPE = [LAUNCH, WATCHDOG, AGENT, RANKS[0], SUPERVISOR, GATEWAY, GATEWAY.groups[0], HOLD,
              FAULTS]


@pytest.mark.parametrize("record", EVERY_TYPE, ids=lambda r: type(r).__name__)
def test_every_contract_type_round_trips(record):
    text = record.to_json()
    assert type(record).from_json(text, "f.json") == record
    # every field is written, in declaration order (the order of the keys in the file)
    assert list(json.loads(text)) == [f.name for f in dataclasses.fields(record)]
    # a value differing from the default in every field: nothing is lost on the way
    defaults = [f for f in dataclasses.fields(record)
                if f.default is not dataclasses.MISSING
                and getattr(record, f.name) == f.default]
    assert defaults == []


@pytest.mark.parametrize("cls", [LaunchConfig, WatchdogConfig, Hold])
def test_defaults_round_trip_and_absent_optional_keys_stay_absent(cls):
    record = cls(until=5.0) if cls is Hold else cls(argv=["x"]) if cls is LaunchConfig else cls()
    text = record.to_json()
    assert cls.from_json(text) == record
    if cls is LaunchConfig:
        # data_parallel_ranks, ready_url and workdir are left out when None
        assert {"data_parallel_ranks", "ready_url", "workdir"}.isdisjoint(json.loads(text))
        assert json.loads(text)["secrets_file"] is None      # written as null


def test_a_whole_number_reads_as_a_float_field():
    # the renderer writes an integral startup timeout as 1800, as it always did
    config = WatchdogConfig.from_json('{"interval_seconds": 5}')
    assert config.interval_seconds == 5.0 and isinstance(config.interval_seconds, float)


SUP = json.loads(SUPERVISOR.to_json())


def edited(**changes):
    return json.dumps({**SUP, **changes})


MALFORMED = [
    ("unknown key", edited(tick=2.0), "tick: unknown key (did you mean tick_s?)"),
    ("missing key", json.dumps({k: v for k, v in SUP.items() if k != "probe_port"}),
     "probe_port: missing"),
    ("boolean for an integer", edited(max_attempts=True),
     "max_attempts: expected an integer, got a boolean true"),
    ("string for a number", edited(tick_s="2"), 'tick_s: expected a number, got a string "2"'),
    ("null for a required value", edited(probe_port=None),
     "probe_port: expected an integer, got null"),
    ("nested type", edited(ranks=[{**SUP["ranks"][0], "units": ["a", 3]}]),
     "ranks[0].units[1]: expected a string, got an integer 3"),
    ("nested unknown key", edited(ranks=[{**SUP["ranks"][0], "port": 1}]),
     "ranks[0].port: unknown key"),
    ("pair of the wrong length", edited(steps=[["node0"]]),
     "steps[0]: expected a list of 2, got 1 item(s)"),
    ("object for a list", edited(ranks={"node0": 0}), "ranks: expected a list, got an object"),
    ("invalid value", edited(max_attempts=0), "max_attempts: must be at least 1"),
    ("step of no rank", edited(steps=[["node9", "u"]]), 'steps[0][0]: "node9" is none of the ranks'),
    ("not an object", "[1, 2]", "expected an object, got a list"),
    ("not JSON", "{'cluster': 'c'}", "not JSON (Expecting property name"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in MALFORMED],
                         ids=[name for name, _, _ in MALFORMED])
def test_a_malformed_file_is_one_error_naming_the_file_and_the_key(tmp_path, text, expected):
    path = tmp_path / "supervisor.json"
    path.write_text(text)
    with pytest.raises(ContractError) as caught:
        SupervisorConfig.load(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and expected in message, message
    assert "\n" not in message


@pytest.mark.parametrize("cls, data, expected", [
    (LaunchConfig, {"argv": []}, "argv: must be a non-empty list of strings"),
    (LaunchConfig, {"argv": ["x"], "kind": "engines"},
     'kind: must be one of "engine", "ray", got "engines"'),
    (LaunchConfig, {"argv": ["x"], "extra": 1}, "extra: unknown key"),
    (WatchdogConfig, {"threshold": 0.3}, "threshold: must be in (0.5, 1.0]"),
    (WatchdogConfig, {"consecutive": 0}, "consecutive: must be at least 1"),
    (AgentConfig, {**json.loads(AGENT.to_json()), "coordination_port": "6379"},
     'coordination_port: expected an integer, got a string "6379"'),
    (Hold, {"by": "me"}, "until: missing"),
    (FaultsConfig, {**json.loads(FAULTS.to_json()), "npus": [0, 0]},
     "npus: must be at most 64 distinct ids in [0, 1024)"),
    (FaultsConfig, {**json.loads(FAULTS.to_json()), "serving_groups": 0}, "serving_groups: must be in [1, 10000]"),
    (FaultsConfig, {**json.loads(FAULTS.to_json()), "log_globs": ["plog/*.log"]},
     "log_globs[0]: must be an absolute path"),
    (FaultsConfig, {**json.loads(FAULTS.to_json()), "engine_metrics_url": "127.0.0.1:8000"},
     "engine_metrics_url: must be an http(s) URL"),
    (FaultsConfig, {**json.loads(FAULTS.to_json()), "policy": {"format": "ascendctl-faults/0"}},
     'policy.format: must be "ascendctl-faults/1"'),
])
def test_each_config_type_refuses_what_its_node_cannot_use(cls, data, expected):
    with pytest.raises(ContractError, match="^x.json: ") as caught:
        cls.from_json(json.dumps(data), "x.json")
    assert expected in str(caught.value)


def test_a_bad_value_is_shown_as_a_short_excerpt():
    with pytest.raises(ContractError) as caught:
        WatchdogConfig.from_json(json.dumps({"unit": ["x" * 100_000]}), "w.json")
    assert len(str(caught.value)) < 120


def test_a_large_config_is_read_in_linear_time():
    # 20 000 ranks (a ~3 MB file) — far beyond any cluster; guards against quadratic checks
    many = [{"node": f"n{i}", "rank": i, "state_url": f"http://n{i}:9101/health/state",
             "units": [layout.ENGINE_UNIT]} for i in range(20_000)]
    text = edited(ranks=many, steps=[[r["node"], layout.ENGINE_UNIT] for r in many],
                  head_node="n0")
    started = time.perf_counter()
    config = SupervisorConfig.from_json(text)
    assert time.perf_counter() - started < 5.0
    assert len(config.ranks) == 20_000


def test_every_release_config_file_has_its_type():
    assert set(RELEASE_CONFIGS) == {layout.ENGINE_CONFIG, layout.RAY_CONFIG,
                                    layout.WATCHDOG_CONFIG, layout.AGENT_CONFIG,
                                    layout.SUPERVISOR_CONFIG, layout.GATEWAY_CONFIG,
                                    layout.FAULTS_CONFIG}


# -- the node programs refuse a bad file the same way ------------------------------------

@pytest.mark.parametrize("module, args, name, prefix", [
    ("launcher", [], layout.ENGINE_CONFIG, "ascendctl-launcher: bad launch config: "),
    ("watchdog", [], layout.WATCHDOG_CONFIG, "ascendctl-watchdog: bad config: "),
    ("supervisor", [], layout.SUPERVISOR_CONFIG, "ascendctl-supervisor: bad config: "),
    ("exporter", ["--port", "0", "--agent"], layout.AGENT_CONFIG,
     "ascendctl-exporter: bad agent config: "),
])
def test_a_node_program_given_a_bad_config_says_which_file_and_key(tmp_path, module, args,
                                                                    name, prefix):
    path = tmp_path / name
    path.write_text('{"argv": ["x"], "threshold": "high", "cluster": 3}')
    done = subprocess.run([sys.executable, "-m", f"ascendctl_runtime.{module}", *args,
                           str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": RUNTIME_PARENT})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(prefix + f"{path}: "), line


# -- the hold file ------------------------------------------------------------------------

def test_the_hold_is_written_and_read_by_the_same_code(tmp_path):
    root = str(tmp_path)
    written = healthstore.write_hold(root, 120, "root@jump", "deploy r-1")
    assert Hold.load(healthstore.hold_path(root)) == written
    assert healthstore.read_hold(root) == written
    assert healthstore.read_hold(root, now=written.until + 1) is None     # expired
    assert healthstore.release_hold(root) and healthstore.read_hold(root) is None
    assert not healthstore.release_hold(root)


def test_a_hold_file_that_is_no_hold_holds_for_an_hour_from_its_mtime(tmp_path):
    root = str(tmp_path)
    path = healthstore.hold_path(root)
    open(path, "w").close()                               # touch supervisor.hold
    mtime = os.stat(path).st_mtime
    hold = healthstore.read_hold(root, now=mtime + 10)
    assert hold == Hold(until=mtime + healthstore.HOLD_WITHOUT_EXPIRY_S)
    with open(path, "w") as handle:
        json.dump({"until": "tomorrow", "by": "ops"}, handle)
    mtime = os.stat(path).st_mtime
    hold = healthstore.read_hold(root, now=mtime + 10)
    assert hold is not None and hold.until == mtime + healthstore.HOLD_WITHOUT_EXPIRY_S
    assert hold.reason.startswith("not a hold file: until: expected a number")
