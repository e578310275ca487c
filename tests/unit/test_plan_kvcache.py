"""The planner counts sequences as the engine's allocator does for hybrid attention + MTP
models (ascendctl.plan.kvcache with the release's page rule, ascendctl.plan.pagerules;
tests/lab/test_plan_vllm_allocator.py runs vLLM's own functions on other inputs)."""

from __future__ import annotations

import pytest

from ascendctl.plan import PlanRefused, check_inventory, plan_inventory
from ascendctl.plan.builtin import builtin_config
from ascendctl.plan.kvcache import allocate, kv_cache_groups, pages
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import FULL, LINEAR
from ascendctl.plan.pagerules import UPSTREAM, rule_for
from tests.unit.test_plan_inventories import make_inventory, serving

QWEN35 = builtin_config("qwen3.5-397b-a17b")
REFERENCE = Layout("dp", 2, 8, dp=2, expert_parallel=True)
ASCEND_017 = rule_for("0.17.0rc1").rule
# vllm-ascend's requested_memory on a 64 GB 910B: mem_get_info's total x 0.9
BUDGET_910B_090 = int(65_452_113_920 * 0.9)


def test_upstream_vllm_pads_the_state_to_the_attention_page():
    """Plain vLLM (HybridAttentionMambaModelConfig): the rule the planner used for every
    engine before it knew vllm-ascend's."""
    page = pages(QWEN35, REFERENCE, kv_bytes=2, dtype_bytes=2, num_spec=3, rule=UPSTREAM)
    # conv 1536 x (4 - 1 + 3) x 2 B + SSM 8 x 128 x 128 x 4 B
    assert page.state_bytes == 1536 * 6 * 2 + 8 * 128 * 128 * 4 == 542_720
    # 1 KV head (2 heads < TP 8: replicated) x 256 x (K + V) x 2 B per token
    assert page.attention_token_bytes == 1024
    # 16 x cdiv(542720, 16 x 1024) = 544 tokens; the state page is padded to 544 KiB
    assert page.block_size == 544 and page.page_bytes == 544 * 1024


def test_vllm_ascend_sizes_the_block_from_the_k_page_and_pads_up():
    """vllm-ascend v0.17.0rc1 patch_mamba_config.py + model_runner_v1.py page_size_padded."""
    page = pages(QWEN35, REFERENCE, kv_bytes=2, dtype_bytes=2, num_spec=3, rule=ASCEND_017)
    # SSM 8 x 128 x 128 x 4 B = 524,288 B (the larger state tensor); conv 18,432 B
    assert (page.ssm_bytes, page.conv_bytes) == (524_288, 18_432)
    # K only: 1 head x 256 x 2 B = 512 B/token; 128 x cdiv(524288, 128 x 512) = 1024 tokens,
    # and 1024 x 512 B equals the SSM page (the assertion vllm-ascend makes)
    assert page.block_size == 1024 and page.aligned
    # every page: 1024 x 1024 B (K+V) + the 18,432 B conv page
    assert page.attention_page_bytes == 1_048_576
    assert page.page_bytes == 1_048_576 + 18_432 == 1_067_008


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


# Reference deployment (W8A8, DP2 x TP8 + EP16, MTP 3, 910B3 at 0.9), pinned to vllm-ascend
# 0.23.0.post1, whose rule is v0.17.0rc1's for this model (K page; vLLM's grouping at 1.5):
# page 1,067,008 B (above); 16 layers per group (16 attention = 15 + the MTP layer, 45
# DeltaNet = 3 groups of 15) -> a block costs 16 x 1,067,008 = 17,072,128 B.
# Blocks per sequence: 32768 tokens -> cdiv(32768, 1024) = 32 attention + 3 groups x
# (1 + 3) = 12 state = 44; 4096 tokens -> 4 + 12 = 16.
# KV budget = 65,452,113,920 x 0.9 = 58,906,902,528 B minus weights, activations, HCCL and
# runtime (the planner's other figures, unchanged by the page rule: 35,769,646,428 B), that
# is 23,137,256,100 B (21.55 GiB) -> 23,137,256,100 // 17,072,128 = 1355 blocks
# -> 1355 // 44 = 30 sequences at 32768, 1355 // 16 = 84 at 4096.
# (Before: 64 GiB x 0.9 and upstream vLLM's 544-token blocks of 557,056 B gave 40 and 146.)
@pytest.mark.parametrize("max_model_len, blocks, expected", [(32768, 44, 30), (4096, 16, 84)])
def test_reference_deployment_as_vllm_ascend_allocates(tmp_path, max_model_len, blocks,
                                                       expected):
    def edit(data):
        serving(data)["max_model_len"] = max_model_len

    plan = plan_inventory(make_inventory(tmp_path, edit))
    stage = plan.requested.stages[0]
    assert stage.budget == BUDGET_910B_090 == 58_906_902_528
    kv_budget = BUDGET_910B_090 - stage.fixed_bytes
    assert int(kv_budget) // (16 * 1_067_008) // blocks == expected
    assert plan.requested.max_seqs_per_replica == expected
    data = plan.requested.as_dict()["stages"][0]
    assert (data["kv_block_size"], data["kv_page_bytes"], data["kv_groups"],
            data["kv_blocks_per_sequence"]) == (1024, 1_067_008, 4, blocks)


def test_max_num_seqs_vllm_ascend_cannot_hold_is_refused(tmp_path):
    """31 sequences of 32768 tokens: upstream's rule and 64 GiB (40) let it pass; vllm-ascend
    holds 30 (above)."""
    def edit(data, seqs=31):
        serving(data)["max_num_seqs"] = seqs

    with pytest.raises(PlanRefused, match="holds 30 sequences .* fewer than max_num_seqs 31"):
        check_inventory(make_inventory(tmp_path, edit))
    check_inventory(make_inventory(tmp_path, lambda d: edit(d, 30), name="thirty.yaml"))


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
