"""The planner's KV-cache layout against vLLM's own functions (the vLLM wheel on a lab node).

For several configurations of the reference model (Qwen3.5-397B-A17B: 15 full-attention +
45 Gated DeltaNet layers, + the MTP drafter's attention layer) the planner's pinned
formulas (ascendctl.plan.kvcache) must agree with vLLM on: the DeltaNet state shapes
(`MambaStateShapeCalculator.gated_delta_net_state_shape`), page sizes (`MambaSpec`,
`FullAttentionSpec`), the layer groups (`_get_kv_cache_groups_uniform_page_size`) and the
concurrency a KV budget gives (`get_max_concurrency_for_kv_cache_config`).
"""

from __future__ import annotations

import json

import pytest

from ascendctl.plan.builtin import builtin_config
from ascendctl.plan.kvcache import allocate, kv_cache_groups, pages
from ascendctl.plan.layout import Layout

pytestmark = pytest.mark.lab

GIB = 1 << 30
# (tp, speculative tokens, max_model_len, KV budget GiB per NPU)
CONFIGS = [(8, 3, 32768, 24.3), (8, 3, 4096, 24.3), (8, 0, 32768, 20.0), (4, 1, 16384, 12.5),
           (16, 2, 131072, 30.0), (2, 3, 8192, 6.0)]

VLLM_SIDE = r"""
import json, sys
from types import SimpleNamespace
import torch
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, MambaSpec)
from vllm.v1.core.kv_cache_utils import (_get_kv_cache_groups_uniform_page_size,
                                         get_max_concurrency_for_kv_cache_config)

out = []
for case in json.loads(sys.argv[1]):
    conv, ssm = MambaStateShapeCalculator.gated_delta_net_state_shape(
        case["tp"], 16, 64, 128, 128, 4, case["spec"])
    state = MambaSpec(block_size=case["max_model_len"], shapes=(tuple(conv), tuple(ssm)),
                      dtypes=(torch.bfloat16, torch.float32),
                      num_speculative_blocks=case["spec"])
    padded = MambaSpec(block_size=case["max_model_len"], shapes=(tuple(conv), tuple(ssm)),
                       dtypes=(torch.bfloat16, torch.float32),
                       page_size_padded=case["page_bytes"],
                       num_speculative_blocks=case["spec"])
    attention = FullAttentionSpec(block_size=case["block_size"],
                                  num_kv_heads=max(1, 2 // case["tp"]), head_size=256,
                                  dtype=torch.bfloat16)
    specs = {}
    for i in range(60):
        specs[f"layers.{i}"] = attention if i % 4 == 3 else padded
    if case["mtp"]:
        specs["mtp.layers.0"] = attention
    groups = _get_kv_cache_groups_uniform_page_size(specs)
    group_size = max(len(g.layer_names) for g in groups)
    num_blocks = int(case["budget"]) // attention.page_size_bytes // group_size
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=case["max_model_len"]),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        cache_config=SimpleNamespace(mamba_cache_mode="none"))
    out.append({"state_bytes": state.page_size_bytes,
                "attention_page": attention.page_size_bytes,
                "padded_page": padded.page_size_bytes,
                "groups": sorted(len(g.layer_names) for g in groups),
                "concurrency": get_max_concurrency_for_kv_cache_config(vllm_config, config)})
print(json.dumps(out))
"""


def planner_side(tp: int, spec: int, max_model_len: int, budget: float) -> dict:
    cfg = builtin_config("qwen3.5-397b-a17b")
    layout = Layout("mp", 1, tp)
    page = pages(cfg, layout, kv_bytes=2, dtype_bytes=2, num_spec=spec)
    mtp = 1 if spec else 0
    alloc = allocate(cfg, layout, (0, cfg.num_layers), last_stage=True,
                     max_model_len=max_model_len, kv_bytes=2, dtype_bytes=2, num_spec=spec,
                     mtp_layers=mtp)
    return {"tp": tp, "spec": spec, "max_model_len": max_model_len, "mtp": bool(mtp),
            "budget": int(budget * GIB), "block_size": page.block_size,
            "page_bytes": page.page_bytes, "state_bytes": page.state_bytes,
            "groups": sorted(len(g.layers) for g in kv_cache_groups(cfg, mtp)),
            "max_requests": alloc.max_requests(budget * GIB)}


def test_planner_matches_vllm_allocator_functions(lab):
    ours = [planner_side(*case) for case in CONFIGS]
    proc = lab.exec("node0", ["/opt/vllm/bin/python", "-c", VLLM_SIDE, json.dumps(ours)],
                    timeout=300)
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, mine, vllm in zip(CONFIGS, ours, theirs):
        assert mine["state_bytes"] == vllm["state_bytes"], case
        assert mine["page_bytes"] == vllm["attention_page"] == vllm["padded_page"], case
        assert mine["groups"] == vllm["groups"], case
        assert mine["max_requests"] == int(vllm["concurrency"]), (case, vllm["concurrency"])
    reference_32k, reference_4k = theirs[0]["concurrency"], theirs[1]["concurrency"]
    assert abs(ours[0]["max_requests"] - reference_32k) <= 0.05 * reference_32k
    assert abs(ours[1]["max_requests"] - reference_4k) <= 0.05 * reference_4k
