"""A tiny Qwen3 / Qwen3-MoE checkpoint built locally (no hub): a byte-level BPE tokenizer
trained with `tokenizers`, a config, and random BF16 weights as a multi-file safetensors
checkpoint (embeddings, one file per decoder layer, final norm + lm_head) with
model.safetensors.index.json. Needs only tokenizers and numpy on the controller."""

from __future__ import annotations

import json
import struct
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
VOCAB_SIZE = 512
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32          # head_dim 16 fails in vLLM's CPU attention
INTERMEDIATE = 128
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
MOE_INTERMEDIATE = 64

CORPUS = [
    "The lab runs a simulated Ascend cluster of real Linux nodes.",
    "Each node has eight NPUs, a management address and one RoCE port per NPU.",
    "The operator checks the driver, the firmware and the CANN toolkit before a deploy.",
    "A healthy endpoint answers a completion request with generated text.",
    "Hello, how are you today? I am fine, thank you. What is the weather like?",
    "def main():\n    print('hello world')\n    return 0\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2048 4096 65536.",
    "Pipeline parallel splits the layers; tensor parallel splits each layer.",
]


def train_tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 20, trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    ids: dict[str, int] = {}
    for tok in SPECIAL_TOKENS:
        token_id = tokenizer.token_to_id(tok)
        if token_id is None:
            raise RuntimeError(f"the trained tokenizer lacks the special token {tok!r}")
        ids[tok] = token_id
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {"content": tok, "special": True, "normalized": False, "lstrip": False,
                     "rstrip": False, "single_word": False} for tok, i in ids.items()},
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2) + "\n")
    ids["vocab_size"] = tokenizer.get_vocab_size()
    return ids


def model_config(moe: bool, vocab: int, bos: int, eos: int) -> dict:
    config = {
        "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if moe else "qwen3",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": LAYERS,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "use_cache": True,
        "initializer_range": 0.02,
    }
    if moe:
        config.update({"num_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN,
                       "moe_intermediate_size": MOE_INTERMEDIATE, "decoder_sparse_step": 1,
                       "mlp_only_layers": [], "norm_topk_prob": True,
                       "output_router_logits": False, "router_aux_loss_coef": 0.001})
    return config


def layer_shapes(i: int, moe: bool) -> dict[str, tuple[int, ...]]:
    p = f"model.layers.{i}."
    shapes: dict[str, tuple[int, ...]] = {
        p + "input_layernorm.weight": (HIDDEN,),
        p + "post_attention_layernorm.weight": (HIDDEN,),
        p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
        p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
        p + "self_attn.q_norm.weight": (HEAD_DIM,),
        p + "self_attn.k_norm.weight": (HEAD_DIM,),
    }
    if moe:
        shapes[p + "mlp.gate.weight"] = (EXPERTS, HIDDEN)
        for e in range(EXPERTS):
            q = f"{p}mlp.experts.{e}."
            shapes[q + "gate_proj.weight"] = (MOE_INTERMEDIATE, HIDDEN)
            shapes[q + "up_proj.weight"] = (MOE_INTERMEDIATE, HIDDEN)
            shapes[q + "down_proj.weight"] = (HIDDEN, MOE_INTERMEDIATE)
    else:
        shapes[p + "mlp.gate_proj.weight"] = (INTERMEDIATE, HIDDEN)
        shapes[p + "mlp.up_proj.weight"] = (INTERMEDIATE, HIDDEN)
        shapes[p + "mlp.down_proj.weight"] = (HIDDEN, INTERMEDIATE)
    return shapes


def to_bf16_bytes(values) -> bytes:
    """float32 array -> bfloat16 bytes (round to nearest even), little-endian."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: dict[str, tuple[tuple[int, ...], bytes]]) -> int:
    """Write BF16 tensors in the safetensors layout; return the data size in bytes."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        for _shape, data in tensors.values():
            handle.write(data)
    return offset


def build_model(out: Path, moe: bool = False, seed: int = 0) -> dict:
    import numpy as np

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = train_tokenizer(out)
    vocab = ids["vocab_size"]
    config = model_config(moe, vocab, ids["<|endoftext|>"], ids["<|im_end|>"])
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
         "max_new_tokens": 64}, indent=2) + "\n")
    rng = np.random.default_rng(seed)

    def tensor(name: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], bytes]:
        if name.endswith("norm.weight"):
            return shape, to_bf16_bytes(np.ones(shape, dtype=np.float32))
        return shape, to_bf16_bytes(rng.normal(0.0, 0.02, size=shape).astype(np.float32))

    groups: list[dict[str, tuple[int, ...]]] = [{"model.embed_tokens.weight": (vocab, HIDDEN)}]
    groups += [layer_shapes(i, moe) for i in range(LAYERS)]
    groups.append({"model.norm.weight": (HIDDEN,), "lm_head.weight": (vocab, HIDDEN)})
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    weight_map: dict[str, str] = {}
    total = 0
    count = len(groups)
    for number, group in enumerate(groups, start=1):
        filename = f"model-{number:05d}-of-{count:05d}.safetensors"
        total += write_safetensors(out / filename,
                                   {name: tensor(name, shape) for name, shape in group.items()})
        weight_map.update({name: filename for name in group})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    return {"path": str(out), "architecture": config["architectures"][0], "files": files,
            "bytes": sum((out / f).stat().st_size for f in files), "vocab_size": vocab,
            "tensors": len(weight_map)}
