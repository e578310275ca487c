"""The planner counts sequences as vLLM's allocator does for hybrid attention + MTP models
(ascendctl.plan.kvcache: pinned formulas of vLLM 0.17; tests/lab/test_plan_vllm_allocator.py
runs vLLM's own functions on the same configurations)."""

from __future__ import annotations

import pytest

from ascendctl.plan import PlanRefused, check_inventory, plan_inventory
from ascendctl.plan.builtin import builtin_config
from ascendctl.plan.kvcache import allocate, kv_cache_groups, pages
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import FULL, LINEAR
from tests.unit.test_plan_inventories import make_inventory, serving

QWEN35 = builtin_config("qwen3.5-397b-a17b")


def test_state_is_padded_to_the_attention_page():
    page = pages(QWEN35, Layout("dp", 2, 8, dp=2, expert_parallel=True), kv_bytes=2,
                 dtype_bytes=2, num_spec=3)
    # conv 1536 x (4 - 1 + 3) x 2 B + SSM 8 x 128 x 128 x 4 B
    assert page.state_bytes == 1536 * 6 * 2 + 8 * 128 * 128 * 4 == 542_720
    # 1 KV head (2 heads < TP 8: replicated) x 256 x (K + V) x 2 B per token
    assert page.attention_token_bytes == 1024
    # 16 x cdiv(542720, 16 x 1024) = 544 tokens; the state page is padded to 544 KiB
    assert page.block_size == 544 and page.page_bytes == 544 * 1024


def test_layers_are_dealt_into_groups_with_the_drafter():
    groups = kv_cache_groups(QWEN35, mtp_layers=1)
    assert sorted((g.kind, len(g.layers)) for g in groups) == [
        ("full_attention", 16), (LINEAR, 15), (LINEAR, 15), (LINEAR, 15)]
    linear = [g.layers for g in groups if g.kind == LINEAR]
    assert linear[0][:3] == (0, 4, 8) and linear[1][:3] == (1, 5, 9)   # strided, like vLLM
    attention = next(g for g in groups if g.kind != LINEAR)
    assert attention.layers[-1] == "mtp0"


def test_pure_attention_model_is_one_group_of_128_token_blocks():
    cfg = builtin_config("qwen3-235b-a22b")
    groups = kv_cache_groups(cfg, mtp_layers=0)
    assert [len(g.layers) for g in groups] == [cfg.num_layers]
    alloc = allocate(cfg, Layout("mp", 2, 16), (0, cfg.num_layers), last_stage=True,
                     max_model_len=32768, kv_bytes=2, dtype_bytes=2, num_spec=0,
                     mtp_layers=0)
    assert alloc.pages.block_size == 128 and alloc.blocks_per_request == 256
    per_token = 2 * 1 * cfg.head_dim * 2                    # 4 KV heads / TP16 -> 1
    assert alloc.bytes_per_request == 32768 * per_token * cfg.num_layers


@pytest.mark.parametrize("max_model_len, expected", [(32768, 40), (4096, 146)])
def test_reference_deployment_matches_vllm(tmp_path, max_model_len, expected):
    """FACTS.md: vLLM's allocator gives about 40 sequences per replica at 32768 tokens and
    about 146 at 4096 for W8A8, DP2 x TP8 + EP, MTP 3 (the planner said 46 and 284)."""
    def edit(data):
        serving(data)["max_model_len"] = max_model_len

    plan = plan_inventory(make_inventory(tmp_path, edit))
    got = plan.requested.max_seqs_per_replica
    assert abs(got - expected) <= 0.05 * expected, got
    stage = plan.requested.as_dict()["stages"][0]
    assert stage["kv_block_size"] == 544 and stage["kv_groups"] == 4
    assert stage["kv_blocks_per_sequence"] == -(-max_model_len // 544) + 3 * (1 + 3)


def test_max_num_seqs_vllm_cannot_hold_is_refused(tmp_path):
    """44 sequences of 32768 tokens: the old count (46) let it pass; vLLM holds 40."""
    def edit(data):
        serving(data)["max_num_seqs"] = 44

    with pytest.raises(PlanRefused, match="fewer than max_num_seqs 44"):
        check_inventory(make_inventory(tmp_path, edit))


def test_more_speculative_tokens_cost_state_blocks(tmp_path):
    counts = []
    for tokens in (1, 3, 5):
        def edit(data, tokens=tokens):
            serving(data)["speculative_config"]["num_speculative_tokens"] = tokens
            serving(data)["max_model_len"] = 4096

        counts.append(plan_inventory(make_inventory(tmp_path, edit,
                                                    name=f"i{tokens}.yaml"))
                      .requested.max_seqs_per_replica)
    assert counts[0] > counts[1] > counts[2]


def test_pipeline_stage_holds_part_of_each_group():
    alloc0 = allocate(QWEN35, Layout("mp", 2, 8, pp=2), (0, 30), last_stage=False,
                      max_model_len=32768, kv_bytes=2, dtype_bytes=2, num_spec=3, mtp_layers=1)
    alloc1 = allocate(QWEN35, Layout("mp", 2, 8, pp=2), (30, 60), last_stage=True,
                      max_model_len=32768, kv_bytes=2, dtype_bytes=2, num_spec=3, mtp_layers=1)
    # stage 0: 7-8 of each group; the scheduler still allocates every group's blocks
    assert alloc0.stage_group_size == 8 and alloc1.stage_group_size == 9
    assert alloc0.blocks_per_request == alloc1.blocks_per_request
    assert FULL in QWEN35.layer_types
