"""The model facts the planner needs, read from a Hugging Face `config.json`.

Handles dense and MoE decoders (Qwen2/3, Qwen3-MoE, Llama-like, DeepSeek-style MLA and
shared experts), and Qwen3-Next / Qwen3.5 hybrids whose `linear_attention` (Gated
DeltaNet) layers keep a fixed recurrent state per sequence instead of a paged KV cache.
Multimodal configs nest the decoder under `text_config`; the vision tower is sized from
`vision_config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import shown

FULL = "full_attention"
LINEAR = "linear_attention"
SLIDING = "sliding_attention"

# Bounds far beyond any real model: a layer count builds per-layer tables, and every size
# goes into float arithmetic.
MAX_LAYERS = 1024
MAX_CONFIG_INT = 1 << 40

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
               "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet geometry (Qwen3-Next / Qwen3.5 `linear_*` keys)."""
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_state_dtype: str | None  # `mamba_ssm_dtype`; None = the model dtype

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


@dataclass(frozen=True)
class Mla:
    """DeepSeek multi-head latent attention: one compressed KV vector per token and layer."""
    kv_lora_rank: int
    q_lora_rank: int | None
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Vision:
    depth: int
    hidden_size: int
    intermediate_size: int
    out_hidden_size: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    num_position_embeddings: int
    deepstack_layers: int

    def params(self) -> int:
        h, inter = self.hidden_size, self.intermediate_size
        patch = self.in_channels * self.temporal_patch_size * self.patch_size ** 2 * h + h
        block = (4 * h                      # two LayerNorms (weight + bias)
                 + h * 3 * h + 3 * h        # fused qkv
                 + h * h + h                # attention output
                 + h * inter + inter        # fc1
                 + inter * h + h)           # fc2
        merged = h * self.spatial_merge_size ** 2
        merger = 2 * h + merged * merged + merged + merged * self.out_hidden_size \
            + self.out_hidden_size
        return (patch + self.num_position_embeddings * h + self.depth * block
                + merger * (1 + self.deepstack_layers))


@dataclass(frozen=True)
class ModelConfig:
    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    attn_output_gate: bool
    layer_types: tuple[str, ...]
    moe_layers: tuple[bool, ...]
    intermediate_size: int
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    linear: LinearAttention | None = None
    mla: Mla | None = None
    sliding_window: int | None = None
    mtp_layers: int = 0
    vision: Vision | None = None
    max_position_embeddings: int | None = None
    source: str = field(default="", compare=False)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and any(self.moe_layers)

    @property
    def full_attention_layers(self) -> int:
        return sum(1 for t in self.layer_types if t != LINEAR)

    @property
    def linear_attention_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == LINEAR)

    def describe(self) -> str:
        parts = [f"{self.num_layers} layers", f"hidden {self.hidden_size}"]
        if self.linear_attention_layers:
            parts.append(f"{self.full_attention_layers} full-attention + "
                         f"{self.linear_attention_layers} linear-attention (Gated DeltaNet)")
        if self.is_moe:
            parts.append(f"{self.num_experts} experts top-{self.experts_per_token}")
        if self.mtp_layers:
            parts.append(f"{self.mtp_layers} MTP layer(s)")
        if self.vision:
            parts.append("vision encoder")
        return ", ".join(parts)


def load_model_config(path: str | os.PathLike[str]) -> ModelConfig:
    path = Path(path)
    from ascendctl.inventory.inputfile import load_json_file

    if not path.exists():
        raise InputError("model config not found", file=str(path))
    # bounded: a regular file, nesting and numbers checked, every failure an InputError
    raw = load_json_file(path, what="model config")
    if not isinstance(raw, dict):
        raise InputError("model config must be a JSON object", file=str(path))
    return parse_model_config(raw, source=str(path))


def parse_model_config(raw: dict[str, Any], *, source: str = "config.json",
                       name: str | None = None) -> ModelConfig:
    """Build a ModelConfig from a Hugging Face config dict (flat or with `text_config`)."""
    if not isinstance(raw.get("text_config") or {}, dict):
        raise InputError("must be an object", file=source, field="text_config")
    text = dict(raw.get("text_config") or {})
    for key, value in raw.items():
        if key not in ("text_config", "vision_config"):
            text.setdefault(key, value)
    reader = _Reader(text, source)

    # the model's shape: each is a divisor somewhere, so 0 is refused
    hidden = reader.int("hidden_size", minimum=1)
    layers = reader.int("num_hidden_layers", limit=MAX_LAYERS, minimum=1)
    heads = reader.int("num_attention_heads", minimum=1)
    kv_heads = reader.int("num_key_value_heads", default=heads, minimum=1)
    head_dim = reader.int("head_dim", default=max(1, hidden // heads), minimum=1)
    vocab = reader.int("vocab_size", minimum=1)
    model_type = _label(text.get("model_type") or raw.get("model_type"), "unknown")

    layer_types = _layer_types(text, layers, reader)
    num_experts = reader.int("num_experts", "n_routed_experts", "num_local_experts",
                             default=0)
    moe_layers = _moe_layers(text, layers, num_experts, reader)
    moe_inter = reader.int("moe_intermediate_size", default=0) if num_experts else 0
    shared_inter = reader.int("shared_expert_intermediate_size", default=0)
    if not shared_inter and num_experts:
        shared_inter = reader.int("n_shared_experts", "num_shared_experts", default=0) \
            * moe_inter
    intermediate = reader.int("intermediate_size", default=0)
    if intermediate == 0 and not all(moe_layers):
        raise InputError("intermediate_size is required for dense layers", file=source,
                         field="intermediate_size")

    linear = None
    if LINEAR in layer_types:
        linear = LinearAttention(
            num_key_heads=reader.int("linear_num_key_heads"),
            num_value_heads=reader.int("linear_num_value_heads"),
            key_head_dim=reader.int("linear_key_head_dim"),
            value_head_dim=reader.int("linear_value_head_dim"),
            conv_kernel=reader.int("linear_conv_kernel_dim", default=4),
            ssm_state_dtype=_dtype_name(text.get("mamba_ssm_dtype")),
        )
    mla = None
    if text.get("kv_lora_rank"):
        mla = Mla(kv_lora_rank=reader.int("kv_lora_rank"),
                  q_lora_rank=reader.int("q_lora_rank", default=0) or None,
                  qk_nope_head_dim=reader.int("qk_nope_head_dim"),
                  qk_rope_head_dim=reader.int("qk_rope_head_dim"),
                  v_head_dim=reader.int("v_head_dim"))
    vision = _vision(raw.get("vision_config"), source)
    torch_dtype = _dtype_name(text.get("torch_dtype") or text.get("dtype")) or "bfloat16"
    tie = bool(text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False)))
    return ModelConfig(
        name=name or _label(raw.get("_name_or_path"), model_type),
        model_type=model_type,
        hidden_size=hidden, num_layers=layers, vocab_size=vocab,
        tie_word_embeddings=tie, torch_dtype=torch_dtype,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        attn_output_gate=bool(text.get("attn_output_gate", model_type.startswith(
            ("qwen3_next", "qwen3_5")))),
        layer_types=layer_types, moe_layers=moe_layers, intermediate_size=intermediate,
        num_experts=num_experts,
        experts_per_token=reader.int("num_experts_per_tok", "moe_topk", "top_k",
                                     default=0) if num_experts else 0,
        moe_intermediate_size=moe_inter, shared_expert_intermediate_size=shared_inter,
        linear=linear, mla=mla,
        sliding_window=reader.int("sliding_window", default=0) or None,
        mtp_layers=reader.int("mtp_num_hidden_layers", "num_nextn_predict_layers", default=0,
                              limit=MAX_LAYERS),
        vision=vision,
        max_position_embeddings=reader.int("max_position_embeddings", default=0) or None,
        source=source,
    )


class _Reader:
    def __init__(self, data: dict[str, Any], source: str):
        self.data, self.source = data, source

    def int(self, *keys: str, default: int | None = None, limit: int = MAX_CONFIG_INT,
            minimum: int = 0) -> int:
        for key in keys:
            value = self.data.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                kind = "a positive" if minimum == 1 else "a non-negative"
                raise InputError(f"must be {kind} integer (got {shown(value)})",
                                 file=self.source, field=key)
            if value > limit:
                raise InputError(f"{shown(value)} is implausibly large (limit {limit})",
                                 file=self.source, field=key)
            return value
        if default is None:
            raise InputError("required key is missing", file=self.source, field=keys[0])
        return default


def _dtype_name(value: Any) -> str | None:
    if value is None:
        return None
    name = str(value).removeprefix("torch.")
    return {"float": "float32", "half": "float16"}.get(name, name)


def _layer_types(text: dict[str, Any], layers: int, reader: _Reader) -> tuple[str, ...]:
    declared = text.get("layer_types")
    if declared is not None:
        if not isinstance(declared, list) or len(declared) != layers:
            raise InputError(f"layer_types must list one type per layer ({layers})",
                             file=reader.source, field="layer_types")
        known = {FULL, LINEAR, SLIDING}
        for kind in declared:
            if not isinstance(kind, str) or kind not in known:
                raise InputError(f"unknown layer type {shown(kind)} (known: "
                                 f"{', '.join(sorted(known))})",
                                 file=reader.source, field="layer_types")
        return tuple(declared)
    interval = reader.int("full_attention_interval", default=0)
    if interval:
        return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers))
    return (FULL,) * layers


def _moe_layers(text: dict[str, Any], layers: int, experts: int,
                reader: _Reader) -> tuple[bool, ...]:
    if not experts:
        return (False,) * layers
    if "first_k_dense_replace" in text:          # DeepSeek
        first = reader.int("first_k_dense_replace")
        freq = reader.int("moe_layer_freq", default=1) or 1
        return tuple(i >= first and i % freq == 0 for i in range(layers))
    dense = text.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) for i in dense):
        raise InputError("must be a list of layer numbers", file=reader.source,
                         field="mlp_only_layers")
    step = reader.int("decoder_sparse_step", default=1) or 1
    dense_layers = set(dense)
    return tuple(i not in dense_layers and (i + 1) % step == 0 for i in range(layers))


def _vision(raw: Any, source: str) -> Vision | None:
    if not isinstance(raw, dict) or "depth" not in raw:
        return None
    reader = _Reader(raw, source + ":vision_config")
    hidden = reader.int("hidden_size")
    return Vision(
        depth=reader.int("depth"), hidden_size=hidden,
        intermediate_size=reader.int("intermediate_size", default=4 * hidden),
        out_hidden_size=reader.int("out_hidden_size", default=hidden),
        patch_size=reader.int("patch_size", default=14),
        temporal_patch_size=reader.int("temporal_patch_size", default=2),
        in_channels=reader.int("in_channels", default=3),
        spatial_merge_size=reader.int("spatial_merge_size", default=2),
        num_position_embeddings=reader.int("num_position_embeddings", default=0),
        deepstack_layers=_count(raw, "deepstack_visual_indexes", reader.source),
    )


def _label(value: Any, fallback: str) -> str:
    """A name from the config for the report: short printable text, else the fallback."""
    if isinstance(value, str) and value and len(value) <= 200 and value.isprintable():
        return value
    return fallback


def _count(raw: dict[str, Any], key: str, source: str) -> int:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise InputError("must be a list", file=source, field=key)
    return len(value)
