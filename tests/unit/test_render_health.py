"""What a release carries for gang recovery: configs the node runtime accepts, the
supervisor on the head only, the start order of deploy, and the plan token."""

from __future__ import annotations

import json

import pytest

from ascendctl.render import render_release, render_warnings
from ascendctl.render.health import TOKEN_KEY, plan_token
from ascendctl.render.secrets import resolve_secrets
from ascendctl_runtime.contract import AgentConfig, SupervisorConfig, WatchdogConfig
from ascendctl_runtime.nodeutil import parse_env_file
from tests.unit.test_plan_inventories import make_inventory, serving


def files_of(inv, secrets=None):
    return {node: {f.path: f for f in files}
            for node, files in render_release(inv, release_id="r-x", secrets=secrets).items()}


def test_runtime_accepts_every_rendered_config(tmp_path):
    inv = make_inventory(tmp_path)
    files = files_of(inv, {"api_key": "k"})
    for node, by_path in files.items():
        for name, loader in (("agent.json", AgentConfig.load),
                             ("watchdog.json", WatchdogConfig.load)):
            path = tmp_path / f"{node}-{name}"
            path.write_bytes(by_path[name].content)
            loader(str(path))
    path = tmp_path / "supervisor.json"
    path.write_bytes(files["node0"]["supervisor.json"].content)
    config = SupervisorConfig.load(str(path))
    assert [r.node for r in config.ranks] == [h.name for h in inv.hosts]
    assert config.steps == [(h.name, "ascendctl-engine.service") for h in inv.hosts]
    assert all(r.state_url == f"http://{h.address}:{inv.deploy.exporter_port}/health/state"
               for r, h in zip(config.ranks, inv.hosts))


def test_only_the_head_runs_the_supervisor(tmp_path):
    files = files_of(make_inventory(tmp_path))
    assert "units/ascendctl-supervisor.service" in files["node0"]
    assert "supervisor.json" in files["node0"]
    assert not any("supervisor" in path for path in files["node1"])
    agent = json.loads(files["node1"]["agent.json"].content)
    assert agent["plan_url"].endswith(":9101/health/plan") and not agent["is_head"]


def test_engine_units_never_restart_or_start_on_their_own(tmp_path):
    files = files_of(make_inventory(tmp_path))
    for node in files.values():
        text = node["units/ascendctl-engine.service"].content.decode()
        assert "\nRestart=no\n" in text and "\n[Install]" not in text
        exporter = node["units/ascendctl-exporter.service"].content.decode()
        assert "--agent" in exporter and "WantedBy=multi-user.target" in exporter


def test_ray_mode_starts_ray_everywhere_then_the_head_engine_in_deploys_order(tmp_path):
    def ray(data):
        serving(data).update(mode="ray", data_parallel_size=1, data_parallel_size_local=None,
                             api_server_count=None, tensor_parallel_size=8,
                             pipeline_parallel_size=2)
    files = files_of(make_inventory(tmp_path, ray))
    config = json.loads(files["node0"]["supervisor.json"].content)
    assert config["steps"] == [["node0", "ascendctl-ray.service"],
                               ["node0", "ascendctl-engine.service"],
                               ["node1", "ascendctl-ray.service"]]
    assert "Restart=no" in files["node1"]["units/ascendctl-ray.service"].content.decode()


def test_the_plan_token_is_secret_stable_and_per_cluster(tmp_path):
    inv = make_inventory(tmp_path)
    one = plan_token(inv, {"api_key": "key-1"})
    assert one == plan_token(inv, {"api_key": "key-1"})            # deploys stay no-ops
    assert one != plan_token(inv, {"api_key": "key-2"}) and "key-1" not in one
    assert plan_token(inv, {"api_key": "key-1", "health_token": "explicit"}) == "explicit"
    other = make_inventory(tmp_path, lambda d: d["all"]["vars"]["cluster"].update(name="other"))
    assert plan_token(other, {"api_key": "key-1"}) != one
    files = files_of(inv, {"api_key": "key-1"})
    env = parse_env_file(files["node1"]["secrets.env"].content.decode())
    assert env[TOKEN_KEY] == one and files["node1"]["secrets.env"].mode == 0o600


def test_health_token_from_a_0600_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_API_KEY", "sk-unit-0001")
    secret = tmp_path / "health.token"
    secret.write_text("from-a-file\n")
    secret.chmod(0o600)

    def edit(data):
        serving(data)["health"] = {"token": {"file": str(secret)}}
    inv = make_inventory(tmp_path, edit)
    found = resolve_secrets(inv)
    assert found == {"api_key": "sk-unit-0001", "health_token": "from-a-file"}
    secret.chmod(0o644)
    from ascendctl.errors import InputError

    with pytest.raises(InputError) as err:
        resolve_secrets(inv)
    assert ": serving.health.token: " in str(err.value) and "chmod 600" in str(err.value)
    assert str(err.value).startswith(f"{inv.path}:")


def test_without_any_secret_a_warning_says_plans_are_not_authenticated(tmp_path):
    inv = make_inventory(tmp_path, lambda d: serving(d).pop("api_key", None))
    assert any("not authenticated" in w for w in render_warnings(inv))
    off = make_inventory(tmp_path, lambda d: serving(d).update(health={"supervise": False}))
    files = files_of(off, {"api_key": "k"})
    assert "units/ascendctl-supervisor.service" not in files["node0"]
    assert TOKEN_KEY not in files["node0"]["secrets.env"].content.decode()


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"probe_timeout_s": 0},
                                 {"unknown_knob": 1}])
def test_bad_health_settings_are_input_errors(tmp_path, bad):
    from ascendctl.errors import InputError

    with pytest.raises(InputError) as err:
        make_inventory(tmp_path, lambda d: serving(d).update(health=bad))
    assert "serving.health" in str(err.value) or "health" in str(err.value)
