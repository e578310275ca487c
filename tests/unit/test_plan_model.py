"""Model configs: built-ins, real-shaped config.json files, and the per-token / per-sequence
memory they imply."""

from __future__ import annotations

import json

import pytest

from ascendctl.errors import InputError
from ascendctl.plan import builtin_config, load_model_config, parse_model_config
from ascendctl.plan.layout import Layout
from ascendctl.plan.memory import kv_bytes_per_token_layer, linear_state_bytes
from ascendctl.plan.modelcfg import FULL, LINEAR
from ascendctl.plan.weights import total_params

# The lab's tiny models (LAB_NOTES.md): 2 layers, hidden 64, 4 heads / 2 KV heads, head_dim 32.
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "vocab_size": 512, "max_position_embeddings": 1024, "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
TINY_QWEN3_MOE = dict(TINY_QWEN3, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                      num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      decoder_sparse_step=1, mlp_only_layers=[])


def test_qwen35_builtin_matches_the_published_shape():
    cfg = builtin_config("qwen3.5-397b-a17b")
    assert cfg.num_layers == 60
    assert cfg.full_attention_layers == 15 and cfg.linear_attention_layers == 45
    # every fourth layer is full attention: 3 Gated DeltaNet + 1 full, 15 times
    assert cfg.layer_types[:4] == (LINEAR, LINEAR, LINEAR, FULL)
    assert cfg.num_experts == 512 and cfg.experts_per_token == 10
    assert cfg.mtp_layers == 1 and cfg.vision is not None
    # "397B": the checkpoint without the MTP module, within 0.5 %
    assert total_params(cfg, with_mtp=False) == pytest.approx(397e9, rel=0.005)


def test_qwen3_235b_builtin_parameter_count():
    cfg = builtin_config("Qwen/Qwen3-235B-A22B")
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.num_experts) == (94, 64, 4, 128)
    assert total_params(cfg) == pytest.approx(235e9, rel=0.005)


def test_unknown_builtin_is_an_input_error():
    with pytest.raises(InputError, match="qwen3.5-397b-a17b"):
        builtin_config("llama-9000")


@pytest.mark.parametrize("raw", [TINY_QWEN3, TINY_QWEN3_MOE])
def test_lab_tiny_configs_parse(tmp_path, raw):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    cfg = load_model_config(path)
    assert cfg.num_layers == 2 and cfg.hidden_size == 64 and cfg.head_dim == 32
    assert cfg.is_moe == ("num_experts" in raw)
    assert cfg.torch_dtype == "float32"
    # 2 (K, V) x 2 KV heads x 32 x 2 bytes per token and layer at TP1; 1 head each at TP2
    assert kv_bytes_per_token_layer(cfg, Layout("mp", 1, 1), 2) == 256
    assert kv_bytes_per_token_layer(cfg, Layout("mp", 1, 2), 2) == 128


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    cfg = builtin_config("qwen3.5-397b-a17b")      # 2 KV heads, head_dim 256
    for tp in (2, 4, 8, 16):
        assert kv_bytes_per_token_layer(cfg, Layout("dp", 2, tp), 2) == 2 * 1 * 256 * 2


def test_gated_deltanet_state_matches_vllm_page_size():
    # vLLM logs MambaSpec(shapes=((3, 6144), (16, 128, 128)), dtypes=(bf16, fp32)) for a
    # Qwen3.5 hybrid at TP1: page_size = 3*6144*2 + 16*128*128*4 = 1,085,440 bytes.
    raw = {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 4,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
           "vocab_size": 1000, "full_attention_interval": 4, "linear_num_key_heads": 16,
           "linear_num_value_heads": 16, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
           "mamba_ssm_dtype": "float32", "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 64}
    cfg = parse_model_config(raw)
    assert linear_state_bytes(cfg, Layout("mp", 1, 1), 2, num_spec=0) == 1_085_440
    # speculative tokens widen the conv window; TP splits both states
    assert linear_state_bytes(cfg, Layout("mp", 1, 2), 2, num_spec=3) == \
        (3 + 3) * 3072 * 2 + 8 * 128 * 128 * 4


def test_bad_config_names_the_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in TINY_QWEN3.items() if k != "hidden_size"}))
    with pytest.raises(InputError, match="hidden_size"):
        load_model_config(path)
    path.write_text(json.dumps(dict(TINY_QWEN3, layer_types=["full_attention"])))
    with pytest.raises(InputError, match="layer_types"):
        load_model_config(path)
