"""The planner's KV-cache figures against vLLM's own functions (the vLLM CPU build on a lab
node), on inputs the planner does not produce.

The vLLM side starts from the models' config.json values (the Qwen3.5-35B-A3B fixture, the
builtin Qwen3.5-397B-A17B dict), not from the planner: state shapes and dtypes from
`MambaStateShapeCalculator.gated_delta_net_state_shape` / `MambaStateDtypeCalculator`,
page sizes from `MambaSpec` / `FullAttentionSpec`, then vllm-ascend's rule applied to those
pages as a transcription of `vllm_ascend/patch/platform/patch_mamba_config.py` (the
attention block from the K-only page, `mamba_page_size_padded = attention page + conv page`)
and `vllm_ascend/worker/model_runner_v1.py` `get_kv_cache_spec` (attention specs padded to
it) at v0.17.0rc1, then vLLM's `_get_kv_cache_groups_uniform_page_size`,
`get_kv_cache_config_from_groups` and `get_max_concurrency_for_kv_cache_config`. It must give
the published figures (vllm-ascend#7393, the v0.17.0rc1 release notes) and the planner's.

The lab has vLLM 0.32; vllm-ascend v0.17.0rc1 runs on vLLM 0.17. The functions used agree
for these layer mixes (attention : DeltaNet layers at least 1 : 2.7, beyond either
version's grouping threshold, 1.25 or 1.5).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascendctl.plan import plan_inventory
from ascendctl.plan.builtin import BUILTIN_CONFIGS, builtin_config
from ascendctl.plan.kvcache import allocate
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import load_model_config
from ascendctl.plan.pagerules import rule_for
from tests.unit.test_plan_inventories import make_inventory, serving

pytestmark = pytest.mark.lab

GIB = 1 << 30
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/models/qwen3.5-35b-a3b/config.json"
RELEASE = "0.17.0rc1"


def text_config(name: str) -> dict:
    raw = json.loads(FIXTURE.read_text()) if name == "35b" else \
        BUILTIN_CONFIGS["qwen3.5-397b-a17b"]
    text = raw["text_config"]
    keys = ("num_hidden_layers", "full_attention_interval", "num_key_value_heads", "head_dim",
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_ssm_dtype",
            "mtp_num_hidden_layers")
    return {key: text[key] for key in keys}


# (model, tp, speculative tokens, max_model_len, KV budget GiB)
CONFIGS = [("35b", 8, 3, 32768, 40.0), ("35b", 2, 3, 8192, 12.0), ("35b", 4, 1, 16384, 20.0),
           ("397b", 16, 2, 131072, 30.0), ("397b", 4, 0, 16384, 12.5)]

VLLM_SIDE = r"""
import json, math, sys
from types import SimpleNamespace
import torch
from vllm.model_executor.layers.mamba.mamba_utils import (MambaStateDtypeCalculator,
                                                          MambaStateShapeCalculator)
from vllm.utils.math_utils import cdiv
from vllm.utils.torch_utils import get_dtype_size
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.core.kv_cache_utils import (_get_kv_cache_groups_uniform_page_size,
                                         get_kv_cache_config_from_groups,
                                         get_max_concurrency_for_kv_cache_config)

out = []
for case in json.loads(sys.argv[1]):
    cfg, tp, spec = case["config"], case["tp"], case["spec"]
    shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
        tp, cfg["linear_num_key_heads"], cfg["linear_num_value_heads"],
        cfg["linear_key_head_dim"], cfg["linear_value_head_dim"],
        cfg["linear_conv_kernel_dim"], spec)
    dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        torch.bfloat16, "auto", cfg["mamba_ssm_dtype"])
    kv_heads = max(1, cfg["num_key_value_heads"] // tp)    # ModelConfig.get_num_kv_heads
    head = cfg["head_dim"]

    # vllm_ascend/patch/platform/patch_mamba_config.py @ v0.17.0rc1, as written
    mamba_sizes = [math.prod(s) * get_dtype_size(d) for s, d in zip(shapes, dtypes)]
    ssm_block_page_size, conv_block_page_size = max(mamba_sizes), min(mamba_sizes)
    kernel_block_size = 128
    attn_single_token_k_page_size = head * kv_heads * get_dtype_size(torch.bfloat16)
    attn_block_size = kernel_block_size * cdiv(
        ssm_block_page_size, kernel_block_size * attn_single_token_k_page_size)
    assert attn_single_token_k_page_size * attn_block_size == ssm_block_page_size
    attn_page_size = attn_block_size * 2 * head * kv_heads * get_dtype_size(torch.bfloat16)
    mamba_page_size_padded = attn_page_size + conv_block_page_size

    state = MambaSpec(block_size=case["max_model_len"], shapes=tuple(map(tuple, shapes)),
                      dtypes=tuple(dtypes), page_size_padded=mamba_page_size_padded,
                      num_speculative_blocks=spec)
    attention = FullAttentionSpec(block_size=attn_block_size, num_kv_heads=kv_heads,
                                  head_size=head, dtype=torch.bfloat16)
    # vllm_ascend/worker/model_runner_v1.py get_kv_cache_spec @ v0.17.0rc1: attention pages
    # smaller than the state page get page_size_padded = the state page
    if attention.page_size_bytes < state.page_size_bytes:
        attention = FullAttentionSpec(block_size=attn_block_size, num_kv_heads=kv_heads,
                                      head_size=head, dtype=torch.bfloat16,
                                      page_size_padded=state.page_size_bytes)
    interval = cfg["full_attention_interval"]
    specs = {}
    for i in range(cfg["num_hidden_layers"]):
        full = (i + 1) % interval == 0
        specs[f"model.layers.{i}"] = attention if full else state
    if spec:
        for i in range(cfg["mtp_num_hidden_layers"]):
            specs[f"mtp.layers.{i}"] = attention
    groups = _get_kv_cache_groups_uniform_page_size(specs)
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=case["max_model_len"]),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1,
                                        prefill_context_parallel_size=1),
        attention_config=SimpleNamespace(hisparse_config=None),
        cache_config=SimpleNamespace(
            mamba_cache_mode="none", num_gpu_blocks_override=None,
            prefix_cache_retention_interval=None,
            get_resolved_kv_cache_layout=lambda: KVCacheLayout.LBHNC))
    config = get_kv_cache_config_from_groups(vllm_config, groups, case["budget"])
    out.append({"block_size": attn_block_size, "ssm": ssm_block_page_size,
                "conv": conv_block_page_size, "state_page": state.page_size_bytes,
                "attention_page": attention.page_size_bytes,
                "groups": sorted(len(g.layer_names) for g in groups),
                "num_blocks": config.num_blocks,
                "concurrency": get_max_concurrency_for_kv_cache_config(vllm_config, config)})
print(json.dumps(out))
"""


def vllm_side(lab, cases: list[dict]) -> list[dict]:
    proc = lab.exec("node0", ["/opt/vllm/bin/python", "-c", VLLM_SIDE, json.dumps(cases)],
                    timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planner_side(name: str, tp: int, spec: int, max_model_len: int, budget: int) -> dict:
    cfg = load_model_config(FIXTURE) if name == "35b" else builtin_config("qwen3.5-397b-a17b")
    mtp = cfg.mtp_layers if spec else 0
    alloc = allocate(cfg, Layout("mp", 1, tp), (0, cfg.num_layers), last_stage=True,
                     max_model_len=max_model_len, kv_bytes=2, dtype_bytes=2, num_spec=spec,
                     mtp_layers=mtp, rule=rule_for(RELEASE).rule)
    return {"block_size": alloc.pages.block_size, "ssm": alloc.pages.ssm_bytes,
            "conv": alloc.pages.conv_bytes, "page": alloc.pages.page_bytes,
            "groups": sorted(len(g.layers) for g in alloc.groups),
            "max_requests": alloc.max_requests(budget)}


def test_planner_pages_and_concurrency_match_vllm_with_vllm_ascends_rule(lab, tmp_path):
    cases = [{"config": text_config(name), "tp": tp, "spec": spec, "max_model_len": mml,
              "budget": int(gib * GIB)} for name, tp, spec, mml, gib in CONFIGS]
    # the reference deployment at the KV budget the planner computes for it (the budget is
    # the input; pages, groups and concurrency are what is compared)
    reference = {}
    for mml in (32768, 4096):
        def edit(data, mml=mml):
            serving(data)["max_model_len"] = mml
        inv = make_inventory(tmp_path, edit, name=f"ref{mml}.yaml")
        reference[mml] = plan_inventory(inv).requested
        cases.append({"config": text_config("397b"), "tp": 8, "spec": 3, "max_model_len": mml,
                      "budget": int(reference[mml].stages[0].kv_budget)})
    theirs = vllm_side(lab, cases)

    # vllm-ascend#7393: Qwen3.5-35B at TP8 with MTP 3
    assert (theirs[0]["block_size"], theirs[0]["ssm"], theirs[0]["conv"]) == \
        (512, 262_144, 12_288)
    # v0.17.0rc1 release notes: "with tp 2, the block_size is adjusted to 2048"
    assert theirs[1]["block_size"] == 2048

    keys = [(name, tp, spec, mml) for name, tp, spec, mml, _ in CONFIGS] + \
        [("397b", 8, 3, 32768), ("397b", 8, 3, 4096)]
    for key, case, vllm in zip(keys, cases, theirs):
        mine = planner_side(*key, case["budget"])
        assert vllm["state_page"] == vllm["attention_page"] == mine["page"], key
        assert (mine["block_size"], mine["ssm"], mine["conv"]) == \
            (vllm["block_size"], vllm["ssm"], vllm["conv"]), key
        assert mine["groups"] == vllm["groups"], key
        assert mine["max_requests"] == int(vllm["concurrency"]), (key, vllm)
    # the planner's own plan of the reference deployment says the same as vLLM
    assert reference[32768].max_seqs_per_replica == int(theirs[-2]["concurrency"]) == 30
    assert reference[4096].max_seqs_per_replica == int(theirs[-1]["concurrency"]) == 84
