"""`ascendctl lab model`: a tokenizer and a tiny multi-file Qwen3 / Qwen3-MoE checkpoint."""

from __future__ import annotations

import json
import struct

import pytest

from ascendctl_lab.model import HEAD_DIM, build_model


def read_header(path) -> dict:
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
        data = handle.read()
    header.pop("__metadata__", None)
    for name, meta in header.items():
        start, end = meta["data_offsets"]
        count = 1
        for dim in meta["shape"]:
            count *= dim
        assert meta["dtype"] == "BF16" and end - start == 2 * count, name
        assert end <= len(data)
    return header


@pytest.mark.parametrize("moe", [False, True])
def test_checkpoint_is_indexed_and_sharded(tmp_path, moe):
    info = build_model(tmp_path, moe=moe)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"]
    assert config["head_dim"] >= 32 and config["head_dim"] == HEAD_DIM
    assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 64)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 4
    total = 0
    seen = {}
    for shard in shards:
        header = read_header(tmp_path / shard)
        total += sum(m["data_offsets"][1] - m["data_offsets"][0] for m in header.values())
        seen.update({name: shard for name in header})
    assert seen == index["weight_map"]
    assert index["metadata"]["total_size"] == total
    # Per-layer files: each decoder layer alone in its own shard.
    for layer in range(2):
        files = {f for n, f in seen.items() if n.startswith(f"model.layers.{layer}.")}
        assert len(files) == 1
        assert all(n.startswith(f"model.layers.{layer}.") for n, f in seen.items()
                   if f in files)
    assert seen["model.embed_tokens.weight"] != seen["lm_head.weight"]
    expert = "model.layers.0.mlp.experts.3.down_proj.weight"
    assert (expert in seen) == moe
    assert info["tensors"] == len(seen)


def test_tokenizer_round_trips_and_has_a_chat_template(tmp_path):
    from tokenizers import Tokenizer

    build_model(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() == 512
    text = "Hello, how are you today? 你好"
    assert tok.decode(tok.encode(text).ids) == text
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "<|im_start|>" in config["chat_template"]
    assert tok.token_to_id("<|im_end|>") == json.loads(
        (tmp_path / "config.json").read_text())["eos_token_id"]


def test_rebuilding_is_deterministic(tmp_path):
    build_model(tmp_path / "a")
    build_model(tmp_path / "b")
    for name in ("model-00002-of-00004.safetensors", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
