"""Built-in model configs, for planning before the weights (and their config.json) are at hand.

Values are the models' published Hugging Face `config.json` fields, cross-checked
against several independent copies (see docs/planner.md). Keys not listed fall back to
the same defaults a real config.json would get.
"""

from __future__ import annotations

from typing import Any

from ascendctl.errors import InputError
from ascendctl.plan.modelcfg import ModelConfig, parse_model_config

BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    # Qwen/Qwen3.5-397B-A17B: 60 layers = 15 x (3 Gated DeltaNet + 1 gated full attention),
    # 512 routed experts top-10 + 1 shared, 1 MTP layer, vision encoder (FACTS.md).
    "qwen3.5-397b-a17b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 4096,
            "num_hidden_layers": 60,
            "num_attention_heads": 32,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "attn_output_gate": True,
            "full_attention_interval": 4,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 64,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "mamba_ssm_dtype": "float32",
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "moe_intermediate_size": 1024,
            "shared_expert_intermediate_size": 1024,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "mtp_num_hidden_layers": 1,
            "vocab_size": 248320,
            "max_position_embeddings": 262144,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": 4096,
            "patch_size": 16,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "in_channels": 3,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [],
        },
    },
    # Qwen/Qwen3-235B-A22B: 94 layers, GQA 64 Q / 4 KV heads, 128 experts top-8, no shared expert.
    "qwen3-235b-a22b": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 4096,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}

ALIASES = {
    "qwen/qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
    "qwen3_5-397b-a17b": "qwen3.5-397b-a17b",
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
}


def builtin_names() -> list[str]:
    return sorted(BUILTIN_CONFIGS)


def builtin_config(name: str) -> ModelConfig:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in BUILTIN_CONFIGS:
        raise InputError(f"no built-in model config {name!r} (known: "
                         f"{', '.join(builtin_names())}); give a config.json instead")
    return parse_model_config(BUILTIN_CONFIGS[key], source=f"builtin:{key}", name=key)
