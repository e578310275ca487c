"""Per-node plans: whole directory or only a stage's tensors, per-node indexes, repack."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_weights_checkpoints import qwen3_names, qwen35_names, write_checkpoint

from ascendctl.errors import InputError
from ascendctl.weights.plan import NodeSpec, build_plan
from ascendctl.weights.safetensors_file import read_header, tensor_bytes
from ascendctl.weights.stages import StageSplit

NODES2 = [NodeSpec("node0", 0), NodeSpec("node1", 1)]


def stage_tensors(names, split, stage):
    return sorted(n for n in names if stage in split.stages_of(n))


def files_tensors(plan_node, root: Path) -> dict[str, list[str]]:
    return {f.path: sorted(read_header(f.source).names()) for f in plan_node.files
            if f.path.endswith(".safetensors")}


def test_tensor_parallel_layout_gets_whole_directory(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(4), 3, config={"num_hidden_layers": 4})
    plan = build_plan(tmp_path, NODES2, mode="mp", tp=16, pp=1)
    everything = sorted(p.name for p in tmp_path.iterdir())
    for node in plan.nodes:
        assert node.stages is None and node.index is None
        assert sorted(f.path for f in node.files) == everything


def test_qwen3_pp2_files_split_along_stage_boundaries(tmp_path):
    names = qwen3_names(4)
    per_layer = 11
    # file 1: embed + layers 0-1; file 2: layers 2-3 + norm + lm_head (no mixing)
    write_checkpoint(tmp_path, names, 2, config={"num_hidden_layers": 4,
                                                "tie_word_embeddings": False},
                     chunk_boundaries=[0, 1 + 2 * per_layer])
    plan = build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2)
    split = StageSplit.build(4, 2)
    assert plan.mixed_files == []
    for stage, node in enumerate(plan.nodes):
        assert node.stages == {stage}
        assert node.tensors() == stage_tensors(names, split, stage)
        local = {f.path for f in node.files if f.path.endswith(".safetensors")}
        assert set(node.index["weight_map"].values()) == local
        assert sorted(node.index["weight_map"]) == node.tensors()
        assert {"config.json", "tokenizer.json"} <= {f.path for f in node.files}
        assert "model.safetensors.index.json" not in {f.path for f in node.files}
        assert node.foreign_bytes == 0


def test_mixed_file_goes_to_both_stages_without_repack(tmp_path):
    names = qwen35_names(8)
    write_checkpoint(tmp_path, names, 3, config={"text_config": {"num_hidden_layers": 8},
                                                 "tie_word_embeddings": False})
    plan = build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2)
    assert plan.mixed_files                               # 3 files cut across the split
    split = plan.split
    for stage, node in enumerate(plan.nodes):
        mine = set(stage_tensors(names, split, stage))
        held = set(node.tensors())
        assert mine <= held                               # nothing missing
        assert node.foreign_bytes > 0                     # and some bytes of the other stage
        for path, tensors in files_tensors(node, tmp_path).items():
            assert set(tensors) & mine, f"{path} holds nothing of stage {stage}"
        assert set(node.index["weight_map"]) == held      # index lists exactly local files


def test_repack_gives_each_node_only_its_stage(tmp_path):
    model = tmp_path / "model"
    names = qwen35_names(8)
    write_checkpoint(model, names, 3, config={"text_config": {"num_hidden_layers": 8},
                                              "tie_word_embeddings": False})
    plan = build_plan(model, NODES2, mode="mp", tp=1, pp=2, repack=True,
                      repack_dir=tmp_path / "repack")
    split = plan.split
    assert set(plan.repacked) == set(plan.mixed_files) and plan.repacked
    originals = {}
    for filename in {p.name for p in model.glob("*.safetensors")}:
        header = read_header(model / filename)
        for tensor in header.names():
            originals[tensor] = hashlib.sha256(tensor_bytes(header, tensor)).hexdigest()
    for stage, node in enumerate(plan.nodes):
        assert node.tensors() == stage_tensors(names, split, stage)
        assert node.foreign_bytes == 0
        for planned in node.files:
            if not planned.path.endswith(".safetensors"):
                continue
            header = read_header(planned.source)
            for tensor in header.names():               # bytes copied verbatim
                assert hashlib.sha256(tensor_bytes(header, tensor)).hexdigest() == \
                    originals[tensor]
        assert set(node.index["weight_map"].values()) == \
            {f.path for f in node.files if f.path.endswith(".safetensors")}
    # the visual encoder and embeddings are on stage 0, MTP and lm_head on the last stage
    assert "model.visual.patch_embed.proj.weight" in plan.nodes[0].tensors()
    assert "mtp.fc.weight" in plan.nodes[1].tensors()
    assert "lm_head.weight" not in plan.nodes[0].tensors()


def test_repacked_files_load_with_safetensors_and_are_reused(tmp_path):
    from safetensors import safe_open

    model = tmp_path / "model"
    write_checkpoint(model, qwen3_names(6), 2, config={"num_hidden_layers": 6,
                                                       "tie_word_embeddings": False})
    first = build_plan(model, NODES2, mode="mp", tp=1, pp=2, repack=True,
                       repack_dir=tmp_path / "rp")
    outputs = [f.source for n in first.nodes for f in n.files if ".pp" in f.path]
    assert outputs
    for path in outputs:
        with safe_open(str(path), framework="numpy") as handle:
            assert sorted(handle.keys()) == sorted(read_header(path).names())
    mtimes = {p: p.stat().st_mtime_ns for p in outputs}
    second = build_plan(model, NODES2, mode="mp", tp=1, pp=2, repack=True,
                        repack_dir=tmp_path / "rp")
    assert {p: p.stat().st_mtime_ns for p in outputs} == mtimes
    assert [f.entry for n in second.nodes for f in n.files] == \
        [f.entry for n in first.nodes for f in n.files]


def test_tied_embeddings_also_on_last_stage(tmp_path):
    names = [n for n in qwen3_names(4) if n != "lm_head.weight"]
    write_checkpoint(tmp_path, names, 1, config={"num_hidden_layers": 4,
                                                "tie_word_embeddings": True})
    plan = build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2, repack=True,
                      repack_dir=tmp_path / "rp")
    assert "model.embed_tokens.weight" in plan.nodes[1].tensors()
    assert "model.embed_tokens.weight" in plan.nodes[0].tensors()


def test_index_naming_a_tensor_its_file_lacks_is_refused(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(2), 1, config={"num_hidden_layers": 2})
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00001.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(InputError, match="does not hold it"):
        build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2)


def test_escaping_index_entry_refused_before_anything(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(2), 1, config={"num_hidden_layers": 2})
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["lm_head.weight"] = "../../etc/passwd"
    index_path.write_text(json.dumps(index, indent=2))
    with pytest.raises(InputError, match="escapes the model directory"):
        build_plan(tmp_path, NODES2, mode="mp", tp=16, pp=1)


def test_bad_partition_is_an_input_error(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(4), 1, config={"num_hidden_layers": 4})
    with pytest.raises(InputError, match="VLLM_PP_LAYER_PARTITION"):
        build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2, partition="1,2")


def test_materialise_request_lists_files_and_index(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(4), 2, config={"num_hidden_layers": 4},
                     chunk_boundaries=[0, 23])
    plan = build_plan(tmp_path, NODES2, mode="mp", tp=1, pp=2)
    request = plan.nodes[1].materialise_request("/r/model")
    assert {f["path"] for f in request["files"]} == {f.path for f in plan.nodes[1].files}
    index = json.loads(request["write"]["model.safetensors.index.json"])
    assert set(index["weight_map"].values()) == {"model-00002-of-00002.safetensors"}
