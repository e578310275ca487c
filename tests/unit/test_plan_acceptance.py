"""Issue 5 acceptance: Qwen3.5-397B-A17B on Atlas 800 A2 nodes (64 GB per NPU)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

from pathlib import Path

import pytest
import yaml

from ascendctl.releases.sets import load_matrix
from ascendctl.releases.scope import tutorial_for
from ascendctl.exitcodes import Exit
from ascendctl.plan import PlanRefused, check_inventory, plan_inventory
from ascendctl.plan.memory import GIB
from ascendctl.render import render_release
from tests.unit.test_plan_inventories import EXAMPLE, make_inventory, model, serving, set_nodes
from tests.unit.test_plan_model import TINY_QWEN3

# FACTS.md "The reference deployment", node 0, verbatim (MODEL and $local_ip substituted).
RECIPE_NODE0 = (
    "vllm serve MODEL --host 0.0.0.0 --port 8000 --data-parallel-size 2 "
    "--api-server-count 2 --data-parallel-size-local 1 --data-parallel-address $local_ip "
    "--data-parallel-rpc-port 13389 --tensor-parallel-size 8 --enable-expert-parallel "
    "--max-num-seqs 16 --max-model-len 32768 --max-num-batched-tokens 4096 "
    "--gpu-memory-utilization 0.9 --no-enable-prefix-caching --quantization ascend "
    "--trust-remote-code --served-model-name qwen3.5 "
    "--speculative-config '{\"method\": \"qwen3_5_mtp\", \"num_speculative_tokens\": 3}' "
    "--compilation-config '{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}' "
    "--additional-config '{\"enable_cpu_binding\":true, "
    "\"multistream_overlap_shared_expert\": true}'"
)
JSON_FLAGS = {"--speculative-config", "--compilation-config", "--additional-config"}
MODEL_DIR = "/var/lib/ascendctl/releases/r1/model"
NODE0_IP, NODE1_IP = "198.18.100.10", "198.18.100.11"
# each release's tutorial command (node 0 and node 1), recorded with its source
TUTORIAL_FIXTURE = Path(__file__).parents[1] / "fixtures" / "tutorials" / \
    "qwen3.5-397b-a17b-mp.yaml"
TUTORIALS = yaml.safe_load(TUTORIAL_FIXTURE.read_text())["releases"]


def options(argv: list[str]) -> list[tuple[str, object]]:
    """(flag, value) pairs in order; JSON values parsed so spacing does not matter."""
    out, i = [], 0
    while i < len(argv):
        flag = argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            out.append((flag, json.loads(value) if flag in JSON_FLAGS else value))
            i += 2
        else:
            out.append((flag, None))
            i += 1
    return out


def recipe(node_ip: str) -> list[str]:
    return shlex.split(RECIPE_NODE0.replace("MODEL", MODEL_DIR).replace("$local_ip", node_ip))


def engine_argv(files) -> list[str]:
    return json.loads(next(f for f in files if f.path == "engine.json").content)["argv"]


def test_w8a8_on_two_a2_fits_with_dp2_tp8_ep_and_shows_the_numbers(tmp_path):
    inv = make_inventory(tmp_path)
    plan = check_inventory(inv)          # raises if it does not fit
    req = plan.requested
    assert (req.layout.dp, req.layout.tp, req.layout.expert_parallel, req.layout.ep_size) \
        == (2, 8, True, 16)
    # weights per NPU: 393B expert params in int8 over 16 NPUs plus the bf16 rest
    assert 20 * GIB < req.weights_per_npu < 30 * GIB
    assert req.kv_budget_per_npu > 15 * GIB
    assert req.workload.max_model_len == 32768
    assert req.max_seqs_per_replica >= 16
    assert req.max_seqs_total == 2 * req.max_seqs_per_replica
    # the recommendation is the recipe's own layout
    assert plan.recommended.layout == req.layout


def flag_set(argv: list[str]) -> list[tuple[str, object]]:
    """(flag, value) pairs, flags spelled with dashes (vLLM reads `--speculative_config`
    as `--speculative-config`), in no order."""
    spelled = [t.replace("_", "-") if t.startswith("--") else t for t in argv]
    return sorted(options(spelled), key=repr)


def pin_release(row):
    """An inventory edit pinning `versions:` to ROW's set (the driver only where the set
    states no HDK to compare it with)."""
    def edit(data):
        versions = data["all"]["vars"]["versions"]
        python = row.python[1]
        builds = [b.version for b in row.torch_npu_builds
                  if b.python == python and b.arch == "aarch64"]      # Atlas 800 A2: Kunpeng
        versions.update(vllm_ascend=row.vllm_ascend, vllm=row.vllm, cann=row.cann,
                        python=python, torch_npu=(builds or [row.torch_npu])[0])
        if row.hdk.version and not row.hdk.unverified:
            versions["driver"] = row.hdk.version
    return edit


def test_the_reference_release_has_no_tutorial_and_renders_the_recipe(tmp_path):
    # v0.17.0rc1's docs have no Qwen3.5-397B-A17B tutorial (it came with v0.18.0rc1): the
    # reference pinned to it renders FACTS.md's recipe, flag by flag
    inv = make_inventory(tmp_path, pin_release(load_matrix().find("0.17.0rc1")))
    assert inv.versions.vllm_ascend == "0.17.0rc1"
    assert tutorial_for(load_matrix().find("0.17.0rc1"), inv.model) is None
    assert "0.17.0rc1" not in TUTORIALS
    nodes = render_release(inv, release_id="r1")
    node0, node1 = engine_argv(nodes["node0"]), engine_argv(nodes["node1"])
    assert options(node0) == options(recipe(NODE0_IP))
    expected1 = [o for o in options(recipe(NODE1_IP)) if o[0] != "--api-server-count"]
    expected1 = [("--data-parallel-address", NODE0_IP) if o[0] == "--data-parallel-address"
                 else o for o in expected1]
    expected1 += [("--headless", None), ("--data-parallel-start-rank", "1")]
    assert sorted(options(node1), key=repr) == sorted(expected1, key=repr)


@pytest.mark.parametrize("release", sorted(TUTORIALS))
def test_rendered_command_lines_equal_the_pinned_releases_tutorial(tmp_path, release):
    row = load_matrix().find(release)
    inv = make_inventory(tmp_path, pin_release(row))
    nodes = render_release(inv, release_id="r1")
    tutorial = TUTORIALS[release]
    flags = tutorial_for(row, inv.model)
    for node, ip, key, variable in (("node0", NODE0_IP, "node0", "$local_ip"),
                                    ("node1", NODE1_IP, "node1", "$node0_ip")):
        ours = flag_set(engine_argv(nodes[node]))
        command = tutorial[key].replace("Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp", MODEL_DIR)
        theirs = flag_set(shlex.split(command.replace(
            variable, NODE0_IP if node == "node1" else ip)))
        if "--quantization ascend" in (flags.differs if flags else ""):
            # the inventory's W8A8 weights need it; this tutorial's A2 example omits it
            assert ("--quantization", "ascend") not in theirs
            theirs = sorted(theirs + [("--quantization", "ascend")], key=repr)
        assert ours == theirs, (release, node)


def test_bf16_on_two_a2_is_refused_with_the_numbers(tmp_path):
    inv = make_inventory(tmp_path, lambda d: model(d).update(quantization="none"))
    with pytest.raises(PlanRefused) as caught:
        check_inventory(inv)
    err = caught.value
    assert err.exit_code == Exit.FAILED
    message = str(err)
    # 48.4 GiB of weights + 8.5 GiB of workspace, HCCL and runtime exceed the 54.86 GiB
    # budget (60.96 GiB total x 0.9): not even one sequence
    assert "exceed the 54.9 GiB budget (61.0 GiB total x gpu_memory_utilization 0.9)" \
        in message
    assert "Needs 4 nodes" in message
    plan = err.plan
    assert plan.requested.weights_per_npu > 45 * GIB
    assert plan.requested.max_seqs_per_replica < 16
    assert plan.recommended is None and plan.scale_out.layout.nodes == 4


def test_bf16_on_four_a2_fits(tmp_path):
    def four(data):
        set_nodes(data, 4)
        serving(data)["data_parallel_size"] = 4
        model(data)["quantization"] = "none"

    plan = check_inventory(make_inventory(tmp_path, four))
    assert plan.requested.layout.ep_size == 32
    assert plan.requested.max_seqs_per_replica >= 16


def test_cli_prints_the_table_and_exits_1_on_refusal(tmp_path):
    make_inventory(tmp_path, lambda d: model(d).update(quantization="none"))
    result = subprocess.run([sys.executable, "-m", "ascendctl", "plan", "-i",
                             str(tmp_path / "inventory.yaml")],
                            capture_output=True, text=True, env={"ASCENDCTL_PLAIN": "1",
                                                                 "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1, result.stderr
    assert "DOES NOT FIT" in result.stdout and "KV budget" in result.stdout
    assert "max sequences at 32768 tokens" in result.stdout
    assert result.stderr.startswith("error: ") and "Needs 4 nodes" in result.stderr


def test_cli_json_for_the_example():
    result = subprocess.run([sys.executable, "-m", "ascendctl", "plan", "-i", str(EXAMPLE),
                             "--json"], capture_output=True, text=True, check=True)
    data = json.loads(result.stdout)
    assert data["requested"]["fits"] is True
    stage = data["requested"]["stages"][0]
    assert stage["kv_budget_bytes"] > 0 and stage["max_sequences"] >= 16
    assert data["flags"]["recommended"][:4] == ["--data-parallel-size", "2",
                                               "--data-parallel-size-local", "1"]


@pytest.mark.parametrize("chip, utilization, refused", [
    ("910B3", 0.99, False), ("910B4", 0.98, False), ("910B4", 0.99, True)])
def test_too_high_gpu_memory_utilization_is_refused(tmp_path, chip, utilization, refused):
    """vllm-ascend refuses when mem_get_info's free memory (0.36 GiB below the total on an
    idle chip: 60.6 of 60.96 GiB, vllm-ascend#10700) is below total x utilization. 910B3:
    0.99 x 60.96 = 60.35 GiB <= 60.6 (starts). 910B4 (28.96 GiB total, 28.60 free):
    0.98 -> 28.38 (starts), 0.99 -> 28.67 (refused)."""
    def edit(data):
        data["all"]["vars"]["cluster"]["chip"] = chip
        serving(data).update(gpu_memory_utilization=utilization)

    problems = plan_inventory(make_inventory(tmp_path, edit)).requested.problems
    assert any("vLLM refuses to start" in p for p in problems) is refused


def test_lab_tiny_model_plans_from_its_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_QWEN3))

    def lab(data):
        set_nodes(data, 2)
        m = model(data)
        m.update(quantization="none", source=str(tmp_path), builtin_config=None)
        serving(data).update(mode="mp", tensor_parallel_size=1, pipeline_parallel_size=2,
                             data_parallel_size=1, data_parallel_size_local=None,
                             enable_expert_parallel=False, api_server_count=None,
                             max_model_len=256, speculative_config=None)

    plan = plan_inventory(make_inventory(tmp_path, lab))
    assert plan.model.num_layers == 2
    assert [s.layers for s in plan.requested.stages] == [(0, 1), (1, 2)]
    assert plan.requested.fits


def test_qwen3_235b_on_one_a2(tmp_path):
    def one_node(data):
        set_nodes(data, 1)
        model(data).update(builtin_config="qwen3-235b-a22b", quantization="w8a8")
        serving(data).update(data_parallel_size=1, api_server_count=None,
                             speculative_config=None, max_num_seqs=8)

    plan = plan_inventory(make_inventory(tmp_path, one_node))
    assert plan.model.num_layers == 94
    assert plan.requested.fits
    assert plan.requested.layout.ep_size == 8
    # 94 layers x (K + V) x 1 of 4 KV heads per TP8 rank x 128 x 2 bytes x 32768 tokens
    assert plan.requested.stages[0].sequence["kv"] == 94 * 2 * 128 * 2 * 32768
    assert 8 <= plan.requested.max_seqs_per_replica < 16
