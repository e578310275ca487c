"""Tensor → pipeline stage (Qwen3 and Qwen3.5 names), node → stages, matching pp_split."""

from __future__ import annotations

import pytest

from ascendctl.plan.pp_split import stage_ranges
from ascendctl.weights.stages import StageSplit, classify, node_stages


@pytest.mark.parametrize("name,kind,layer", [
    ("model.embed_tokens.weight", "embed", None),
    ("model.layers.0.self_attn.q_proj.weight", "layer", 0),
    ("model.layers.27.mlp.down_proj.weight", "layer", 27),
    ("model.layers.3.mlp.down_proj.weight_scale", "layer", 3),       # msModelSlim W8A8
    ("model.norm.weight", "norm", None),
    ("lm_head.weight", "lm_head", None),
    ("model.language_model.embed_tokens.weight", "embed", None),
    ("model.language_model.layers.59.linear_attn.in_proj_qkvz.weight", "layer", 59),
    ("model.language_model.layers.3.self_attn.q_proj.weight", "layer", 3),
    ("model.language_model.norm.weight", "norm", None),
    ("model.visual.blocks.0.attn.qkv.weight", "visual", None),
    ("mtp.layers.0.mlp.experts.3.up_proj.weight", "mtp", None),
    ("mtp.fc.weight", "mtp", None),
    ("rotary_emb.inv_freq", "other", None),
])
def test_classify_real_names(name, kind, layer):
    role = classify(name)
    assert (role.kind, role.layer) == (kind, layer)


@pytest.mark.parametrize("layers,pp", [(layers, pp) for layers in (1, 2, 7, 28, 60, 61, 94)
                                       for pp in (1, 2, 3, 4, 8) if pp <= layers])
def test_layer_stage_matches_pp_split(layers, pp):
    split = StageSplit.build(layers, pp)
    ranges = stage_ranges(layers, pp)
    for layer in range(layers):
        stage = split.stages_of(f"model.layers.{layer}.mlp.up_proj.weight")
        expected = next(s for s, (a, b) in enumerate(ranges) if a <= layer < b)
        assert stage == {expected}
        assert split.stages_of(f"model.language_model.layers.{layer}.mlp.gate.weight") == \
            {expected}


def test_61_layers_pp2_is_31_30():
    split = StageSplit.build(61, 2)
    assert split.ranges == ((0, 31), (31, 61))
    assert split.stages_of("model.layers.30.self_attn.o_proj.weight") == {0}
    assert split.stages_of("model.layers.31.self_attn.o_proj.weight") == {1}
    # DeepSeek-style MTP layer numbered after the decoder stack → last stage
    assert split.stages_of("model.layers.61.eh_proj.weight") == {1}


def test_partition_override():
    split = StageSplit.build(60, 4, "10,20,20,10")
    assert split.ranges == ((0, 10), (10, 30), (30, 50), (50, 60))
    assert split.stages_of("model.language_model.layers.29.mlp.gate.weight") == {1}
    assert split.stages_of("model.language_model.layers.30.mlp.gate.weight") == {2}


def test_qwen35_edges_go_where_vllm_builds_them():
    split = StageSplit.build(60, 4)
    assert split.stages_of("model.language_model.embed_tokens.weight") == {0}
    assert split.stages_of("model.visual.merger.linear_fc1.weight") == {0}
    assert split.stages_of("model.language_model.norm.weight") == {3}
    assert split.stages_of("lm_head.weight") == {3}
    assert split.stages_of("mtp.norm.weight") == {3}
    assert split.stages_of("some.unknown.tensor") == {0, 1, 2, 3}


def test_tied_or_mtp_embeddings_also_on_last_stage():
    split = StageSplit.build(4, 2, embed_on_last=True)
    assert split.stages_of("model.embed_tokens.weight") == {0, 1}


@pytest.mark.parametrize("mode,tp,pp,nnodes,expected", [
    ("mp", 1, 2, 2, [{0}, {1}]),            # the lab case
    ("mp", 8, 2, 2, [{0}, {1}]),
    ("mp", 8, 4, 4, [{0}, {1}, {2}, {3}]),
    ("mp", 4, 4, 2, [{0, 1}, {2, 3}]),
    ("mp", 16, 2, 4, [{0}, {0}, {1}, {1}]),  # a stage spans two nodes
    ("mp", 8, 1, 2, [None, None]),          # TP only: whole directory
    ("dp", 8, 1, 2, [None, None]),
    ("ray", 8, 2, 2, [None, None]),
])
def test_node_stages(mode, tp, pp, nnodes, expected):
    got = [node_stages(mode=mode, tp=tp, pp=pp, nnodes=nnodes, node_rank=i)
           for i in range(nnodes)]
    assert got == [None if e is None else frozenset(e) for e in expected]
