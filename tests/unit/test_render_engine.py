"""Engine command lines per launch mode, their environment, and coherent timeouts."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendctl.errors import InputError
from ascendctl.render import render_release
from ascendctl.render.engine import data_parallel_ranks
from ascendctl.render.envfile import format_env_file
from ascendctl_runtime.nodeutil import parse_env_file   # what the node reads back
from ascendctl.render.timeouts import RANK_START_WAIT_S, check_timeouts
from tests.unit.test_plan_inventories import make_inventory, model, serving, set_nodes
from tests.unit.test_plan_model import TINY_QWEN3


def launcher(files, name="engine.json"):
    return json.loads(next(f for f in files if f.path == name).content)


def env_of(files):
    return parse_env_file(next(f for f in files if f.path == "engine.env").content.decode())


def lab_inventory(tmp_path):
    """What the lab runs: vLLM CPU, mp over 2 nodes, PP2 (LAB_NOTES.md)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(TINY_QWEN3))

    def lab(data):
        set_nodes(data, 2)
        hosts = data["all"]["children"]["ascend"]["hosts"]
        for rank, host in enumerate(hosts.values()):
            host["env"] = {"VLLM_CPU_OMP_THREADS_BIND": str(rank)}
        model(data).update(source=str(tmp_path / "model"), builtin_config=None,
                           quantization="none", dtype="bfloat16", trust_remote_code=False,
                           served_name="tiny")
        serving(data).update(
            mode="mp", master_port=29555, tensor_parallel_size=1, pipeline_parallel_size=2,
            data_parallel_size=1, data_parallel_size_local=None, api_server_count=None,
            enable_expert_parallel=False, max_model_len=256, speculative_config=None,
            compilation_config=None, additional_config=None, enable_prefix_caching=None,
            max_num_batched_tokens=None, api_key=None,
            extra_args=["--kv-cache-memory-bytes", "64M"],
            env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    return make_inventory(tmp_path, lab)


def test_lab_mp_command_lines(tmp_path):
    inv = lab_inventory(tmp_path)
    nodes = render_release(inv, release_id="lab1")
    head, follower = launcher(nodes["node0"])["argv"], launcher(nodes["node1"])["argv"]
    common = ["--distributed-executor-backend", "mp", "--nnodes", "2"]
    assert head[:3] == ["vllm", "serve", f"{inv.deploy.root}/releases/lab1/model"]
    for argv, rank in ((head, "0"), (follower, "1")):
        text = " ".join(argv)
        assert " ".join(common) in text
        assert f"--node-rank {rank} --master-addr 198.18.100.10 --master-port 29555" in text
        assert "--pipeline-parallel-size 2" in text and "--max-model-len 256" in text
        # the checkpoint is float32: --dtype bfloat16 changes something, so it is passed
        assert "--dtype bfloat16" in text
        assert argv[-2:] == ["--kv-cache-memory-bytes", "64M"]
        # nothing Ascend-only that would break the CPU engine
        assert "--quantization" not in argv and "--enable-expert-parallel" not in argv
    assert "--headless" in follower and "--headless" not in head
    assert not launcher(nodes["node0"])["headless"] and launcher(nodes["node1"])["headless"]
    env0, env1 = env_of(nodes["node0"]), env_of(nodes["node1"])
    assert (env0["VLLM_HOST_IP"], env1["VLLM_HOST_IP"]) == ("198.18.100.10", "198.18.100.11")
    assert (env0["VLLM_CPU_OMP_THREADS_BIND"], env1["VLLM_CPU_OMP_THREADS_BIND"]) == ("0", "1")
    assert env0["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # no API key: secrets.env holds only the gang supervisor's plan token
    secrets = next(f for f in nodes["node0"] if f.path == "secrets.env")
    assert b"VLLM_API_KEY" not in secrets.content and b"ASCENDCTL_HEALTH_TOKEN" in secrets.content


def test_recipe_environment_and_overrides(tmp_path):
    def overrides(data):
        serving(data)["env"] = {"HCCL_BUFFSIZE": "512", "EXTRA": "a b"}
        host = data["all"]["children"]["ascend"]["hosts"]["node1"]
        host["env"] = {"HCCL_BUFFSIZE": "256"}
        host["nic"] = "ens5"
    inv = make_inventory(tmp_path, overrides)
    nodes = render_release(inv, release_id="r1")
    env0, env1 = env_of(nodes["node0"]), env_of(nodes["node1"])
    assert env0["HCCL_IF_IP"] == "198.18.100.10"
    for key in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"):
        assert env0[key] == "enp189s0f0" and env1[key] == "ens5"
    assert (env0["OMP_PROC_BIND"], env0["OMP_NUM_THREADS"], env0["TASK_QUEUE_ENABLE"]) == \
        ("false", "1", "1")
    assert env0["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert env0["HCCL_CONNECT_TIMEOUT"] == "600" and env0["HCCL_EXEC_TIMEOUT"] == "1836"
    # vllm-ascend reads no rank table (PR #4941): hccl.json is rendered, not exported
    assert "RANK_TABLE_FILE" not in env0 and "RANK_TABLE_FILE" not in env1
    assert any(f.path == "hccl.json" for f in nodes["node0"])
    assert (env0["HCCL_BUFFSIZE"], env1["HCCL_BUFFSIZE"]) == ("512", "256")
    assert env0["EXTRA"] == "a b"


def test_rank_table_is_exported_only_when_asked(tmp_path):
    def asked(data):
        serving(data)["export_rank_table"] = True
    nodes = render_release(make_inventory(tmp_path, asked), release_id="r1")
    assert env_of(nodes["node1"])["RANK_TABLE_FILE"] == "/var/lib/ascendctl/releases/r1/hccl.json"


def test_ray_mode_units_and_serve_command(tmp_path):
    def ray(data):
        serving(data).update(mode="ray", data_parallel_size=1, data_parallel_size_local=None,
                             api_server_count=None, tensor_parallel_size=8,
                             pipeline_parallel_size=2, engine="/opt/venv/bin/vllm")
    inv = make_inventory(tmp_path, ray)
    nodes = render_release(inv, release_id="r1")
    assert launcher(nodes["node0"], "ray.json")["argv"] == [
        "/opt/venv/bin/ray", "start", "--head", "--port=6379",
        "--node-ip-address=198.18.100.10", "--block"]
    assert launcher(nodes["node1"], "ray.json")["argv"] == [
        "/opt/venv/bin/ray", "start", "--address=198.18.100.10:6379",
        "--node-ip-address=198.18.100.11", "--block"]
    serve = launcher(nodes["node0"])["argv"]
    assert " ".join(serve).count("--distributed-executor-backend ray") == 1
    assert not any(f.path == "engine.json" for f in nodes["node1"])
    env1 = env_of(nodes["node1"])
    assert env1["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert env1["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    watchdog1 = launcher(nodes["node1"], "watchdog.json")
    assert watchdog1["unit"] == "ascendctl-ray.service"
    unit = next(f for f in nodes["node0"] if f.path.endswith("engine.service")).content
    assert b"Requires=ascendctl-ray.service" in unit


def test_connect_timeout_shorter_than_the_start_spread_is_refused(tmp_path):
    def tight(data):
        set_nodes(data, 4)
        serving(data).update(data_parallel_size=4,
                             hccl_connect_timeout=3 * RANK_START_WAIT_S)
    inv = make_inventory(tmp_path, tight)
    with pytest.raises(InputError) as caught:
        render_release(inv, release_id="r1")
    assert "serving.hccl_connect_timeout" in str(caught.value)
    assert f"{3 * RANK_START_WAIT_S} s" in str(caught.value)
    assert caught.value.line is not None
    inv_ok = make_inventory(tmp_path, lambda d: (set_nodes(d, 4), serving(d).update(
        data_parallel_size=4, hccl_connect_timeout=3 * RANK_START_WAIT_S + 60)))
    warnings = check_timeouts(inv_ok)
    assert any("less than" in w for w in warnings)


def test_secret_is_redacted_unless_given(tmp_path):
    inv = make_inventory(tmp_path)
    redacted = next(f for f in render_release(inv, release_id="r1")["node0"]
                    if f.path == "secrets.env")
    assert redacted.secret and redacted.mode == 0o600
    assert b"redacted" in redacted.content
    shown = next(f for f in render_release(inv, release_id="r1",
                                           secrets={"api_key": "s3cr$t\"x"})["node0"]
                 if f.path == "secrets.env")
    assert parse_env_file(shown.content.decode())["VLLM_API_KEY"] == 's3cr$t"x'
    others = b"".join(f.content for f in render_release(
        inv, release_id="r1", secrets={"api_key": "s3cr$t\"x"})["node0"] if not f.secret)
    assert b"s3cr" not in others


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
                       st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF,
                                             blacklist_characters="\x7f"), max_size=30),
                       max_size=6))
def test_env_file_round_trips(values):
    assert parse_env_file(format_env_file(list(values.items()))) == values


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.integers(1, 12), local=st.sampled_from([1, 2, 4, 8]))
def test_dp_start_ranks_are_contiguous_and_disjoint(tmp_path_factory, nodes, local):
    tmp = tmp_path_factory.mktemp("dp")

    def layout(data):
        set_nodes(data, nodes)
        serving(data).update(data_parallel_size=nodes * local,
                             data_parallel_size_local=local, tensor_parallel_size=8 // local,
                             hccl_connect_timeout=7200, startup_timeout=7200)
    inv = make_inventory(tmp, layout)
    ranks = data_parallel_ranks(inv)
    rendered = render_release(inv, release_id="r1", checkpoint_dtype="bfloat16")
    seen: list[int] = []
    for host in inv.hosts:
        argv = launcher(rendered[host.name])["argv"]
        own = ranks[host.name]
        assert len(own) == local
        if host.is_head:
            assert "--data-parallel-start-rank" not in argv and own.start == 0
        else:
            start = int(argv[argv.index("--data-parallel-start-rank") + 1])
            assert start == own.start
        seen.extend(own)
    assert seen == list(range(nodes * local))     # contiguous, in rank order, no overlap
