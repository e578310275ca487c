"""Synthetic checkpoints with real Qwen3 / Qwen3.5 tensor names (tiny BF16 tensors),
shared by the weights tests, and a check that the safetensors library reads them."""

from __future__ import annotations

import json
from pathlib import Path

from ascendctl_lab.model import write_safetensors

QWEN3_LAYER = ("input_layernorm.weight", "post_attention_layernorm.weight",
               "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
               "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
               "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
QWEN35_LINEAR = ("input_layernorm.weight", "post_attention_layernorm.weight",
                 "linear_attn.in_proj_qkvz.weight", "linear_attn.in_proj_ba.weight",
                 "linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.dt_bias",
                 "linear_attn.norm.weight", "linear_attn.out_proj.weight",
                 "mlp.gate.weight", "mlp.experts.0.gate_proj.weight",
                 "mlp.experts.0.down_proj.weight", "mlp.shared_expert.up_proj.weight",
                 "mlp.shared_expert_gate.weight")
QWEN35_FULL = ("input_layernorm.weight", "post_attention_layernorm.weight",
               "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
               "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
               "mlp.gate.weight", "mlp.experts.0.up_proj.weight")


def qwen3_names(layers: int) -> list[str]:
    names = ["model.embed_tokens.weight"]
    for i in range(layers):
        names += [f"model.layers.{i}.{suffix}" for suffix in QWEN3_LAYER]
    return names + ["model.norm.weight", "lm_head.weight"]


def qwen35_names(layers: int) -> list[str]:
    names = ["model.language_model.embed_tokens.weight",
             "model.visual.patch_embed.proj.weight", "model.visual.blocks.0.attn.qkv.weight",
             "model.visual.merger.linear_fc1.weight"]
    for i in range(layers):
        suffixes = QWEN35_FULL if i % 4 == 3 else QWEN35_LINEAR
        names += [f"model.language_model.layers.{i}.{suffix}" for suffix in suffixes]
    names += ["model.language_model.norm.weight", "lm_head.weight",
              "mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight", "mtp.norm.weight",
              "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"]
    return names


def _bytes_for(name: str, index: int) -> tuple[tuple[int, ...], bytes]:
    count = 4 + index % 5
    data = bytes((index * 7 + k) % 251 for k in range(count * 2))
    return (count,), data


def write_checkpoint(out: Path, names: list[str], files: int, *, config: dict,
                     chunk_boundaries: list[int] | None = None) -> dict[str, str]:
    """Split `names` in order over `files` files (boundaries: first index of each file)."""
    out.mkdir(parents=True, exist_ok=True)
    if chunk_boundaries is None:
        step = -(-len(names) // files)
        chunk_boundaries = list(range(0, len(names), step))
    bounds = chunk_boundaries + [len(names)]
    weight_map: dict[str, str] = {}
    for number in range(len(bounds) - 1):
        filename = f"model-{number + 1:05d}-of-{len(bounds) - 1:05d}.safetensors"
        chunk = names[bounds[number]:bounds[number + 1]]
        write_safetensors(out / filename, {n: _bytes_for(n, names.index(n)) for n in chunk})
        weight_map.update({n: filename for n in chunk})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2))
    (out / "config.json").write_text(json.dumps(config))
    (out / "tokenizer.json").write_text("{}")
    return weight_map


def test_synthetic_checkpoint_is_real_safetensors(tmp_path):
    from safetensors import safe_open

    weight_map = write_checkpoint(tmp_path, qwen35_names(4), 2,
                                  config={"text_config": {"num_hidden_layers": 4}})
    seen = {}
    for filename in sorted(set(weight_map.values())):
        with safe_open(str(tmp_path / filename), framework="numpy") as handle:
            for key in handle.keys():
                seen[key] = filename
                assert handle.get_slice(key).get_dtype() == "BF16"
    assert seen == weight_map
