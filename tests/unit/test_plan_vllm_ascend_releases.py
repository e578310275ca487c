"""The rows of ascendctl.plan.pagerules read from the PyPI sdists of vllm-ascend 0.23.0.post1
to 0.30.0rc2 and the vLLM each is paired with (issue 21, build point 1).

No public log of vllm-ascend v0.28 or later gives a block or page size for these models
(searched: "Setting attention block size", "Padding mamba page size", KV cache size lines
for Qwen3.5 / Qwen3-Next), so each release's code path is applied here by hand to the
models' config.json values (the Qwen3.5-35B-A3B fixture, the builtin Qwen3.5-397B-A17B),
citing the lines it follows, and the planner must give the same figures.
tests/lab/test_plan_vllm_allocator.py runs vLLM's own functions on the same values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascendctl.releases.sets import load_matrix
from ascendctl.plan import plan_inventory
from ascendctl.plan.builtin import BUILTIN_CONFIGS
from tests.unit.test_plan_acceptance import pin_release
from tests.unit.test_plan_inventories import make_inventory, serving
from tests.unit.test_plan_vllm_ascend_rule import FIXTURE, first_stage, qwen35_35b

SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
BF16 = 2


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def text_config(model: str) -> dict:
    if model == "35b":
        return json.loads(FIXTURE.read_text())["text_config"]
    return BUILTIN_CONFIGS["qwen3.5-397b-a17b"]["text_config"]


def gdn_state(cfg: dict, tp: int, spec: int) -> tuple[int, int]:
    """(conv, SSM) bytes: vllm model_executor/layers/mamba/mamba_utils.py
    gated_delta_net_state_shape @ 0.28.0, 0.30.0 (conv (conv_dim / tp) x (kernel - 1 +
    num_spec) in bf16; temporal (v_heads / tp, v_dim, k_dim) in mamba_ssm_dtype, which
    models/config.py Qwen3_5ForConditionalGenerationConfig makes the SSM cache dtype)."""
    conv_dim = (cfg["linear_key_head_dim"] * cfg["linear_num_key_heads"] * 2
                + cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
    conv = conv_dim // tp * (cfg["linear_conv_kernel_dim"] - 1 + spec) * BF16
    ssm = (cfg["linear_num_value_heads"] // tp * cfg["linear_value_head_dim"]
           * cfg["linear_key_head_dim"] * SSM_DTYPE_BYTES[cfg["mamba_ssm_dtype"]])
    return conv, ssm


def kv_heads(cfg: dict, tp: int) -> int:
    """ModelConfig.get_num_kv_heads: split over TP, one at least."""
    return max(1, cfg["num_key_value_heads"] // tp)


def pages_v028(cfg: dict, tp: int, spec: int) -> tuple[int, int, int]:
    """(block, attention page, padded page): vllm_ascend/patch/platform/patch_mamba_config.py
    @ sdist 0.28.0rc1 (byte-identical in 0.29.0rc1), for a model without a sparse indexer."""
    # lines 12-24: _get_sparse_index_kpool is None without index_topk
    assert "index_topk" not in cfg and "index_kpool" not in cfg
    sizes = gdn_state(cfg, tp, spec)
    ssm_block_page_size, conv_block_page_size = max(sizes), min(sizes)
    k_page = cfg["head_dim"] * kv_heads(cfg, tp) * BF16
    token_page = 2 * cfg["head_dim"] * kv_heads(cfg, tp) * BF16
    # lines 126-141: the K-page block, asserted equal to the SSM page; it replaces the
    # block_size of 16 (smaller)
    attn_block_size = 128 * cdiv(ssm_block_page_size, 128 * k_page)
    assert k_page * attn_block_size == ssm_block_page_size
    attn_page_size = attn_block_size * token_page
    # lines 143-157: mamba_page_size_padded = attention page + conv page; model_runner_v1.py
    # @ sdist 0.28.0rc1 lines 5929-5938 pad every smaller attention page up to it
    return attn_block_size, attn_page_size, attn_page_size + conv_block_page_size


def pages_v030(cfg: dict, tp: int, spec: int) -> tuple[int, int, int]:
    """(block, attention page, padded page): vllm-ascend 0.30.0rc1/rc2 on vLLM 0.30.0.
    vllm_ascend/platform.py @ sdist 0.30.0rc1 lines 405-406: update_block_size_for_backend
    calls vLLM's; patch_mamba_config.py lines 77-78 aligns nothing without a sparse
    indexer. vllm platforms/interface.py @ sdist 0.30.0:"""
    assert "index_topk" not in cfg
    # lines 628-639, phase 1: block = the backend's preferred size for 16; the Ascend
    # backend's kernel blocks are [128] (vllm_ascend/attention/attention_v1.py line 147-151)
    # and 16 is no multiple of 128, so the smallest, 128
    block_size = 128
    # lines 778-962 (_align_hybrid_block_size, mamba_cache_mode "none"):
    token_page = 2 * kv_heads(cfg, tp) * cfg["head_dim"] * BF16   # FullAttentionSpec(1)
    mamba_page_size = sum(gdn_state(cfg, tp, spec))               # MambaSpec, unpadded
    alignment = max(128, block_size)
    attn_block_size = alignment * cdiv(mamba_page_size, alignment * token_page)
    block_size = max(block_size, attn_block_size)
    attn_page_size = block_size * token_page
    # mamba_page_size_padded = attn_page_size; model_runner_v1.py @ sdist 0.30.0rc1 lines
    # 6334-6343 pad no attention page (none is smaller)
    return block_size, attn_page_size, attn_page_size


# (model, tp, spec): #7393's case, the release notes' TP2 case, the reference's shape
SHAPES = [("35b", 8, 3), ("35b", 2, 3), ("397b", 8, 3)]


# What each release's code gives for SHAPES, transcribed above; the planner must agree.
K_PAGE_0_28 = {
    # K 1 x 256 x 2 = 512 B/token; 128 x cdiv(262,144, 128 x 512) = 512 tokens;
    # 512 x 1,024 + conv 12,288 (#7393's figures)
    ("35b", 8, 3): (512, 524_288, 536_576),
    # 128 x cdiv(1,048,576, 65,536) = 2048 (the v0.17.0rc1 notes' TP2 block); conv
    # 4096 x 6 x 2 = 49,152
    ("35b", 2, 3): (2048, 2_097_152, 2_146_304),
    # SSM 8 x 128 x 128 x 4 = 524,288 -> 1024 tokens; conv 1536 x 6 x 2 = 18,432
    ("397b", 8, 3): (1024, 1_048_576, 1_067_008),
}
VLLM_HOOK_0_30 = {
    # K+V 1 x 256 x 2 x 2 = 1,024 B/token; state 12,288 + 262,144 = 274,432;
    # 128 x cdiv(274,432, 131,072) = 384 tokens, page 384 x 1,024
    ("35b", 8, 3): (384, 393_216, 393_216),
    # state 49,152 + 1,048,576 = 1,097,728 -> 128 x 9 = 1152 tokens
    ("35b", 2, 3): (1152, 1_179_648, 1_179_648),
    # state 18,432 + 524,288 = 542,720 -> 128 x 5 = 640 tokens
    ("397b", 8, 3): (640, 655_360, 655_360),
}


@pytest.mark.parametrize("release, transcription, expected", [
    # 0.28/0.29 keep the K-page rule for models without an indexer
    ("0.28.0rc1", pages_v028, K_PAGE_0_28),
    ("0.29.0rc1", pages_v028, K_PAGE_0_28),
    # 0.30 leaves the alignment to vLLM with the Ascend kernel block
    ("0.30.0rc1", pages_v030, VLLM_HOOK_0_30),
    ("0.30.0rc2", pages_v030, VLLM_HOOK_0_30),
])
def test_each_releases_code_and_the_planner_give_the_same_pages(tmp_path, release,
                                                                transcription, expected):
    for model, tp, spec in SHAPES:
        assert transcription(text_config(model), tp, spec) == expected[model, tp, spec]
    for tp in (8, 2):
        _, stage = first_stage(tmp_path, qwen35_35b(tp, versions={"vllm_ascend": release}),
                               name=f"tp{tp}.yaml")
        assert (stage["kv_block_size"], stage["kv_attention_page_bytes"],
                stage["kv_page_bytes"]) == expected["35b", tp, 3]


# The reference (W8A8, DP2 x TP8 + EP16, MTP 3, 910B3 at 0.9), the release set pinned.
# Its KV budget does not depend on the release: 58,906,902,528 B minus weights,
# activations, HCCL and runtime (35,769,646,428 B) = 23,137,256,100 B.
# 16 layers per group (15 + 1 MTP attention layers; 45 DeltaNet layers in 3 groups of 15);
# num_blocks = budget // (16 x page) (vLLM get_kv_cache_config_from_groups: 0.23.0 by
# page x group size, 0.30.0 by the largest group's sum of pages, `_get_kv_cache_bytes_per_
# block`); a sequence holds cdiv(max_model_len, block) attention blocks and 3 x (1 + 3)
# state blocks (v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes, mode "none").
# 0.23.0.post1: 16 x 1,067,008 = 17,072,128 B -> 1355 blocks; 32768: 32 + 12 = 44 -> 30;
#   4096: 4 + 12 = 16 -> 84.
# 0.30.0rc2: 16 x 655,360 = 10,485,760 B -> 2206 blocks; 32768: cdiv(32768, 640) = 52 + 12
#   = 64 -> 34; 4096: 7 + 12 = 19 -> 116.
@pytest.mark.parametrize("release, max_model_len, block, page, blocks, expected", [
    ("0.23.0.post1", 32768, 1024, 1_067_008, 44, 30),
    ("0.23.0.post1", 4096, 1024, 1_067_008, 16, 84),
    ("0.30.0rc2", 32768, 640, 655_360, 64, 34),
    ("0.30.0rc2", 4096, 640, 655_360, 19, 116),
])
def test_reference_deployment_per_release(tmp_path, release, max_model_len, block, page,
                                          blocks, expected):
    pin = pin_release(load_matrix().find(release))

    def edit(data):
        pin(data)
        serving(data)["max_model_len"] = max_model_len

    plan = plan_inventory(make_inventory(tmp_path, edit))
    assert plan.workload.page_rule.release == release and plan.workload.page_rule.checked
    stage = plan.requested.stages[0]
    assert round(stage.kv_budget) == 23_137_256_100
    assert 23_137_256_100 // (16 * page) // blocks == expected
    data = plan.requested.as_dict()["stages"][0]
    assert (data["kv_block_size"], data["kv_page_bytes"], data["kv_groups"],
            data["kv_blocks_per_sequence"]) == (block, page, 4, blocks)
    assert plan.requested.max_seqs_per_replica == expected
    assert plan.requested.max_seqs_total == 2 * expected


def test_plan_says_it_used_vllms_hook_for_030(tmp_path):
    pin = pin_release(load_matrix().find("0.30.0rc2"))
    make_inventory(tmp_path, pin)
    argv = [sys.executable, "-m", "ascendctl", "plan", "-i", str(tmp_path / "inventory.yaml")]
    env = {"ASCENDCTL_PLAIN": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    text = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert "KV cache rule: vllm-ascend 0.30.0rc2: vLLM's Platform._align_hybrid_block_size" \
        in text
    assert "super().update_block_size_for_backend" in text
    assert ("blocks of 640 tokens, page 655,360 B (attention 655,360 B; state: SSM "
            "524,288 B + conv 18,432 B), 4 group(s) of 16 layers, 64 blocks per "
            "sequence") in text
    assert "newer than every release" not in text and "not read" not in text
    data = json.loads(subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                     env=env, check=True).stdout)
    rule = data["kv_cache_rule"]
    assert (rule["rule"], rule["release"], rule["release_checked"], rule["note"]) == \
        ("vllm-ascend-vllm-aligned", "0.30.0rc2", True, "")
    assert any("@ sdist 0.30.0rc1, 0.30.0rc2" in source for source in rule["sources"])
