"""The planner's KV-cache figures against vLLM's own functions (the vLLM 0.32 CPU build on a
lab node), on inputs the planner does not produce.

The vLLM side starts from the models' config.json values (the Qwen3.5-35B-A3B fixture, the
builtin Qwen3.5-397B-A17B dict), not from the planner: the state shapes and dtypes from
`Qwen3_5MoeForConditionalGeneration.get_mamba_state_shape_from_config` /
`get_mamba_state_dtype_from_config` (transcribed: the model module needs torchvision, which
the lab's build lacks; registered with vLLM's `ModelRegistry.register_model` and resolved
as vLLM resolves the model), the SSM dtype set by vLLM's
`Qwen3_5ForConditionalGenerationConfig`, then the block and pages by one of the two
vllm-ascend rules:

* k_only (vllm-ascend v0.16.0rc1 - v0.29.x): a transcription of
  `vllm_ascend/patch/platform/patch_mamba_config.py` (the attention block from the K-only
  page, `mamba_page_size_padded = attention page + conv page`; v0.17.0rc1 as written, the
  same code through sdist 0.29.0rc1 for models without a sparse indexer) and
  `vllm_ascend/worker/model_runner_v1.py` `get_kv_cache_spec` (attention specs padded to
  the state page);
* vllm_aligned (v0.30.0rc1, v0.30.0rc2): vLLM's own `Platform.update_block_size_for_backend`
  (`NPUPlatform`'s calls it), with the Ascend attention backend's kernel block sizes ([128],
  `vllm_ascend/attention/attention_v1.py`), which vllm-ascend is not installed to provide.

Then vLLM's `resolve_kv_cache_layout` (no backend declares layouts: LBNHC),
`_get_packed_kv_cache_groups` (its mixed-page path: not taken),
`unify_kv_cache_spec_page_size`, `_get_kv_cache_groups_uniform_page_size`,
`get_kv_cache_config_from_groups` and `get_max_concurrency_for_kv_cache_config`. It must give
the published figures (vllm-ascend#7393, the v0.17.0rc1 release notes) and the planner's.

vLLM 0.32's functions stand in for the vLLM each release pairs with (0.17.0 ... 0.30.0):
for these models they compute the same (the grouping threshold is 1.5 from vLLM 0.18, 1.25
before, and these layer mixes are beyond both; `_align_hybrid_block_size` adds in 0.32 a
rounding to every backend's kernel block, a no-op with one backend of 128).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascendctl.releases.sets import load_matrix
from ascendctl.plan import plan_inventory
from ascendctl.plan.builtin import BUILTIN_CONFIGS, builtin_config
from ascendctl.plan.kvcache import allocate
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import load_model_config
from ascendctl.plan.pagerules import rule_for
from tests.unit.test_plan_acceptance import pin_release
from tests.unit.test_plan_inventories import make_inventory, serving

pytestmark = pytest.mark.lab
# One Python process on a node imports vLLM's allocator functions; no engine is started
# (nothing serves, no NPU or port is held): it runs beside the engine suite
# (tests/conftest.py).
ENGINE_FREE = True

GIB = 1 << 30
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/models/qwen3.5-35b-a3b/config.json"
# the release whose rule the planner side takes for each vLLM-side rule
RELEASES = {"k_only": "0.23.0.post1", "vllm_aligned": "0.30.0rc2"}


def text_config(name: str) -> dict:
    raw = json.loads(FIXTURE.read_text()) if name == "35b" else \
        BUILTIN_CONFIGS["qwen3.5-397b-a17b"]
    text = raw["text_config"]
    keys = ("num_hidden_layers", "full_attention_interval", "num_key_value_heads", "head_dim",
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
            "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_ssm_dtype",
            "mtp_num_hidden_layers")
    return {key: text[key] for key in keys}


# (model, tp, speculative tokens, max_model_len, KV budget GiB), under both rules
CONFIGS = [("35b", 8, 3, 32768, 40.0), ("35b", 2, 3, 8192, 12.0), ("35b", 4, 1, 16384, 20.0),
           ("397b", 16, 2, 131072, 30.0), ("397b", 4, 0, 16384, 12.5)]

VLLM_SIDE = r"""
import json, math, sys
from types import SimpleNamespace
import torch
from vllm.config.cache import CacheConfig
from vllm.model_executor.layers.mamba.mamba_utils import (MambaStateDtypeCalculator,
                                                          MambaStateShapeCalculator)
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.config import Qwen3_5ForConditionalGenerationConfig
from vllm.platforms.interface import Platform
from vllm.utils.math_utils import cdiv
from vllm.utils.torch_utils import get_dtype_size
from vllm.v1.attention.backend import AttentionBackend
from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                              resolve_kv_cache_layout)
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
from vllm.v1.core.kv_cache_utils import (_get_kv_cache_groups_uniform_page_size,
                                         _get_packed_kv_cache_groups,
                                         get_kv_cache_config_from_groups,
                                         get_max_concurrency_for_kv_cache_config,
                                         unify_kv_cache_spec_page_size)


class AscendAttentionKernelBlocks(AttentionBackend):
    # vllm_ascend/attention/attention_v1.py @ sdist 0.30.0rc1, AscendAttentionBackend:
    # kernel block sizes [128] (lines 146-151); no supported_kv_cache_layouts and vLLM's
    # customize_spec. A class vLLM's hook reads, never instantiated.
    @staticmethod
    def get_name():
        return "ASCEND"

    @staticmethod
    def get_supported_kernel_block_sizes():
        return [128]


class Qwen35StateShapes(torch.nn.Module):
    # vllm/model_executor/models/qwen3_5.py @ 0.32.0 lines 608-638, the two classmethods
    # Qwen3_5MoeForConditionalGeneration inherits, as written: that module imports
    # torchvision (through qwen3_vl), which the lab's CPU build lacks, so they are
    # registered under the model's architecture with vLLM's ModelRegistry.register_model
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            vllm_config.model_config.dtype,
            vllm_config.cache_config.mamba_cache_dtype,
            vllm_config.cache_config.mamba_ssm_cache_dtype,
        )

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        parallel_config = vllm_config.parallel_config
        hf_config = vllm_config.model_config.hf_text_config
        tp_size = parallel_config.tensor_parallel_size
        num_spec = (
            vllm_config.speculative_config.num_speculative_tokens
            if vllm_config.speculative_config
            else 0
        )
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp_size,
            hf_config.linear_num_key_heads,
            hf_config.linear_num_value_heads,
            hf_config.linear_key_head_dim,
            hf_config.linear_value_head_dim,
            hf_config.linear_conv_kernel_dim,
            num_spec,
        )


ModelRegistry.register_model("Qwen3_5MoeForConditionalGeneration", Qwen35StateShapes)


class AscendPlatform(Platform):
    # vllm_ascend/platform.py @ sdist 0.30.0rc1: NPUPlatform.update_block_size_for_backend
    # and _align_hybrid_block_size call vLLM's (lines 389-406) for a model without a sparse
    # indexer. vLLM finds the backends in the model's layers, which are not built here.
    @classmethod
    def _find_non_ssm_backends(cls, vllm_config):
        return [AscendAttentionKernelBlocks]


def vllm_config_for(cfg, tp, spec, max_model_len):
    text = SimpleNamespace(**cfg)
    model = SimpleNamespace(
        architecture="Qwen3_5MoeForConditionalGeneration", model_impl="auto",
        convert_type="none", runner_type="generate", dtype=torch.bfloat16, use_mla=False,
        is_hybrid=True, hf_text_config=text, max_model_len=max_model_len,
        # ModelConfig.get_num_kv_heads: split over TP, replicated beyond the KV heads
        get_num_kv_heads=lambda parallel: max(1, cfg["num_key_value_heads"] // tp),
        get_head_size=lambda: cfg["head_dim"])
    config = SimpleNamespace(
        model_config=model, cache_config=CacheConfig(),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp,
                                        decode_context_parallel_size=1,
                                        prefill_context_parallel_size=1),
        speculative_config=SimpleNamespace(num_speculative_tokens=spec) if spec else None,
        attention_config=SimpleNamespace(hisparse_config=None), kv_transfer_config=None)
    Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(config)
    return config


def k_only(config, shapes, dtypes):
    # vllm_ascend/patch/platform/patch_mamba_config.py @ v0.17.0rc1, as written (the same
    # code through sdist 0.29.0rc1 for a model without index_topk)
    cache, model = config.cache_config, config.model_config
    mamba_sizes = [math.prod(s) * get_dtype_size(d) for s, d in zip(shapes, dtypes)]
    ssm_block_page_size, conv_block_page_size = max(mamba_sizes), min(mamba_sizes)
    kernel_block_size = 128
    kv_heads = model.get_num_kv_heads(config.parallel_config)
    attn_single_token_k_page_size = model.get_head_size() * kv_heads * get_dtype_size(
        model.dtype)
    attn_block_size = kernel_block_size * cdiv(
        ssm_block_page_size, kernel_block_size * attn_single_token_k_page_size)
    assert attn_single_token_k_page_size * attn_block_size == ssm_block_page_size
    if cache.block_size < attn_block_size:
        cache.block_size = attn_block_size
    attn_page_size = cache.block_size * 2 * model.get_head_size() * kv_heads * \
        get_dtype_size(model.dtype)
    cache.mamba_page_size_padded = attn_page_size + conv_block_page_size


def vllm_aligned(config):
    # vLLM's own hook, as NPUPlatform calls it at vllm-ascend 0.30.0rc1/rc2
    AscendPlatform.update_block_size_for_backend(config)


out = []
for case in json.loads(sys.argv[1]):
    cfg, tp, spec, mml = case["config"], case["tp"], case["spec"], case["max_model_len"]
    config = vllm_config_for(cfg, tp, spec, mml)
    cache, model = config.cache_config, config.model_config
    model_cls, _ = ModelRegistry.resolve_model_cls(model.architecture, model_config=model)
    shapes = model_cls.get_mamba_state_shape_from_config(config)
    dtypes = model_cls.get_mamba_state_dtype_from_config(config)
    if case["rule"] == "k_only":
        k_only(config, shapes, dtypes)
    else:
        vllm_aligned(config)
    # the patch, both rules: no prefix caching -> mamba_block_size = max_model_len
    cache.mamba_block_size = mml
    kv_heads = model.get_num_kv_heads(config.parallel_config)
    # MambaBase.get_kv_cache_spec (model_executor/layers/mamba/abstract.py)
    state = MambaSpec(block_size=cache.mamba_block_size, shapes=tuple(map(tuple, shapes)),
                      dtypes=tuple(dtypes), page_size_padded=cache.mamba_page_size_padded,
                      mamba_cache_mode=cache.mamba_cache_mode, num_speculative_blocks=spec)
    attention = FullAttentionSpec(block_size=cache.block_size, num_kv_heads=kv_heads,
                                  head_size=model.get_head_size(), dtype=model.dtype)
    # vllm_ascend/worker/model_runner_v1.py get_kv_cache_spec (v0.17.0rc1 ... sdist
    # 0.30.0rc2): attention pages smaller than the state page get page_size_padded = it
    if attention.page_size_bytes < state.page_size_bytes:
        attention = FullAttentionSpec(block_size=cache.block_size, num_kv_heads=kv_heads,
                                      head_size=model.get_head_size(), dtype=model.dtype,
                                      page_size_padded=state.page_size_bytes)
    interval = cfg["full_attention_interval"]
    specs = {}
    for i in range(cfg["num_hidden_layers"]):
        full = (i + 1) % interval == 0
        specs[f"model.layers.{i}"] = attention if full else state
    if spec:
        for i in range(cfg["mtp_num_hidden_layers"]):
            specs[f"mtp.layers.{i}"] = attention
    # get_kv_cache_groups' steps for a hybrid of two spec kinds
    supported = [layout.name for layout in
                 get_supported_kv_cache_layouts([AscendAttentionKernelBlocks])]
    layout = resolve_kv_cache_layout(config, [supported], specs.values())
    packed = _get_packed_kv_cache_groups(config, specs)
    specs = unify_kv_cache_spec_page_size(specs)
    groups = _get_kv_cache_groups_uniform_page_size(specs)
    kv_config = get_kv_cache_config_from_groups(config, groups, case["budget"])
    out.append({"block_size": cache.block_size,
                "ssm": max(math.prod(s) * get_dtype_size(d) for s, d in zip(shapes, dtypes)),
                "conv": min(math.prod(s) * get_dtype_size(d) for s, d in zip(shapes, dtypes)),
                "state_page": state.page_size_bytes,
                "attention_page": attention.page_size_bytes,
                "page_sizes": sorted({s.page_size_bytes for s in specs.values()}),
                "layout": layout.name, "packed": packed is not None,
                "groups": sorted(len(g.layer_names) for g in groups),
                "num_blocks": kv_config.num_blocks,
                "concurrency": get_max_concurrency_for_kv_cache_config(config, kv_config)})
print(json.dumps(out))
"""


def vllm_side(lab, cases: list[dict]) -> list[dict]:
    proc = lab.exec("node0", ["/opt/vllm/bin/python", "-c", VLLM_SIDE, json.dumps(cases)],
                    timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planner_side(rule: str, name: str, tp: int, spec: int, max_model_len: int,
                 budget: int) -> dict:
    cfg = load_model_config(FIXTURE) if name == "35b" else builtin_config("qwen3.5-397b-a17b")
    mtp = cfg.mtp_layers if spec else 0
    alloc = allocate(cfg, Layout("mp", 1, tp), (0, cfg.num_layers), last_stage=True,
                     max_model_len=max_model_len, kv_bytes=2, dtype_bytes=2, num_spec=spec,
                     mtp_layers=mtp, rule=rule_for(RELEASES[rule]).rule)
    return {"block_size": alloc.pages.block_size, "ssm": alloc.pages.ssm_bytes,
            "conv": alloc.pages.conv_bytes, "page": alloc.pages.page_bytes,
            "groups": sorted(len(g.layers) for g in alloc.groups),
            "max_requests": alloc.max_requests(budget)}


def reference_plans(tmp_path) -> dict:
    """The reference deployment's plans (pinned to each rule's release) at 32768 and 4096
    tokens: their KV budget is an input of the vLLM side; pages, groups and concurrency are
    what is compared."""
    plans = {}
    for rule, release in RELEASES.items():
        pin = pin_release(load_matrix().find(release))
        for mml in (32768, 4096):
            def edit(data, mml=mml, pin=pin):
                pin(data)
                serving(data)["max_model_len"] = mml
            inv = make_inventory(tmp_path, edit, name=f"ref-{release}-{mml}.yaml")
            plans[rule, mml] = plan_inventory(inv).requested
    return plans


def test_planner_pages_and_concurrency_match_vllm_under_each_release_rule(lab, tmp_path):
    keys = [(rule, name, tp, spec, mml) for rule in RELEASES
            for name, tp, spec, mml, _ in CONFIGS]
    budgets = [int(gib * GIB) for _ in RELEASES for *_, gib in CONFIGS]
    reference = reference_plans(tmp_path)
    for (rule, mml), plan in reference.items():
        keys.append((rule, "397b", 8, 3, mml))
        budgets.append(int(plan.stages[0].kv_budget))
    cases = [{"rule": rule, "config": text_config(name), "tp": tp, "spec": spec,
              "max_model_len": mml, "budget": budget}
             for (rule, name, tp, spec, mml), budget in zip(keys, budgets)]
    theirs = dict(zip(keys, vllm_side(lab, cases)))

    # vllm-ascend#7393: Qwen3.5-35B at TP8 with MTP 3
    seven = theirs["k_only", "35b", 8, 3, 32768]
    assert (seven["block_size"], seven["ssm"], seven["conv"]) == (512, 262_144, 12_288)
    # v0.17.0rc1 release notes: "with tp 2, the block_size is adjusted to 2048"
    assert theirs["k_only", "35b", 2, 3, 8192]["block_size"] == 2048
    # vLLM's hook with Ascend's kernel block: 128 x cdiv(12,288 + 262,144, 128 x 1,024)
    assert theirs["vllm_aligned", "35b", 8, 3, 32768]["block_size"] == 384

    for key, budget in zip(keys, budgets):
        vllm = theirs[key]
        # one page size and the uniform-page path: no mixed-page grouping in vLLM
        assert vllm["state_page"] == vllm["attention_page"] and \
            vllm["page_sizes"] == [vllm["state_page"]], key
        assert (vllm["layout"], vllm["packed"]) == ("LBNHC", False), key
        mine = planner_side(*key, budget)
        assert mine["page"] == vllm["state_page"], key
        assert (mine["block_size"], mine["ssm"], mine["conv"]) == \
            (vllm["block_size"], vllm["ssm"], vllm["conv"]), key
        assert mine["groups"] == vllm["groups"], key
        assert mine["max_requests"] == int(vllm["concurrency"]), (key, vllm)
    # the planner's own plans of the reference deployment say the same as vLLM
    expected = {("k_only", 32768): 30, ("k_only", 4096): 84,
                ("vllm_aligned", 32768): 34, ("vllm_aligned", 4096): 116}
    for (rule, mml), plan in reference.items():
        vllm = theirs[rule, "397b", 8, 3, mml]
        assert plan.max_seqs_per_replica == int(vllm["concurrency"]) == expected[rule, mml]
