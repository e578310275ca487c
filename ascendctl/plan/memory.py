"""Per-NPU memory outside the weights: KV cache, recurrent state, activations, HCCL, runtime.

Numbers and their sources (see docs/planner.md for the reasoning):
- KV cache: 2 (K and V) x KV heads held by the rank x head_dim x dtype bytes per token and
  full-attention layer; MLA keeps one latent (kv_lora_rank + rope dim) per token and layer.
  Sequences occupy whole blocks of `KV_BLOCK_SIZE` tokens (vllm-ascend's default block).
- Gated DeltaNet layers: per sequence a conv state (conv_kernel - 1 + speculative tokens)
  x conv_dim / tp in the model dtype, and an SSM state value_heads / tp x key_dim x
  value_dim in `mamba_ssm_dtype` (vLLM's `gated_delta_net_state_shape`).
- HCCL: every device communicator takes 2 x HCCL_BUFFSIZE MB (CANN docs); one
  communicator per parallel group of size > 1 (TP, PP, DP, EP).
- Driver: an idle 910B3 shows ~3.3 GB HBM in use (npu-smi fixture); vLLM refuses to start
  when the free memory is below gpu_memory_utilization x total.
"""

from __future__ import annotations

from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import DTYPE_BYTES, LINEAR, SLIDING, ModelConfig

GIB = 1024 ** 3
MIB = 1024 ** 2
KV_BLOCK_SIZE = 128
HCCL_BUFFSIZE_MB_DEFAULT = 1024       # what the renderer sets (FACTS.md recipe)
DRIVER_RESERVED_BYTES = int(3.4 * GIB)  # HBM the driver/firmware holds on an idle chip
RUNTIME_RESERVE_BYTES = 1 * GIB       # CANN context, graph-capture pools, fragmentation
ACTIVATION_HIDDEN_FACTOR = 20         # live hidden-size tensors per batched token at peak
DEFAULT_BATCHED_TOKENS = 8192         # vLLM's default --max-num-batched-tokens for serving


def kv_bytes_per_token_layer(cfg: ModelConfig, layout: Layout, kv_bytes: int) -> int:
    if cfg.mla is not None:
        return (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes
    heads = max(1, cfg.num_kv_heads // layout.tp)
    return 2 * heads * cfg.head_dim * kv_bytes


def linear_state_bytes(cfg: ModelConfig, layout: Layout, dtype_bytes: int,
                       num_spec: int) -> int:
    """Recurrent state of one Gated DeltaNet layer for one sequence on one NPU."""
    la = cfg.linear
    if la is None:
        return 0
    conv = (la.conv_kernel - 1 + num_spec) * (la.conv_dim // layout.tp) * dtype_bytes
    ssm_bytes = DTYPE_BYTES.get(la.ssm_state_dtype or "", dtype_bytes)
    ssm = (la.num_value_heads // layout.tp) * la.key_head_dim * la.value_head_dim * ssm_bytes
    return conv + ssm


def round_to_blocks(tokens: int) -> int:
    return -(-tokens // KV_BLOCK_SIZE) * KV_BLOCK_SIZE


def sequence_bytes(cfg: ModelConfig, layout: Layout, layers: tuple[int, int], *,
                   max_model_len: int, kv_bytes: int, dtype_bytes: int, num_spec: int,
                   mtp_layers: int) -> dict[str, int]:
    """KV + state one sequence of max_model_len tokens needs on one NPU of a stage."""
    tokens = round_to_blocks(max_model_len)
    per_layer = kv_bytes_per_token_layer(cfg, layout, kv_bytes)
    kv = state = 0
    full_layers = 0
    for index in range(*layers):
        kind = cfg.layer_types[index]
        if kind == LINEAR:
            state += linear_state_bytes(cfg, layout, dtype_bytes, num_spec)
        elif kind == SLIDING and cfg.sliding_window:
            kv += per_layer * round_to_blocks(min(max_model_len, cfg.sliding_window))
        else:
            kv += per_layer * tokens
            full_layers += 1
    kv += mtp_layers * per_layer * tokens
    return {"kv": kv, "state": state, "total": kv + state,
            "kv_per_token": per_layer * (full_layers + mtp_layers),
            "attention_layers": full_layers + mtp_layers}


def activation_bytes(cfg: ModelConfig, layout: Layout, layers: tuple[int, int], *,
                     batched_tokens: int, max_num_seqs: int, act_bytes: int,
                     last_stage: bool, num_spec: int) -> int:
    """Peak activation workspace for one forward pass of `batched_tokens` tokens."""
    h = cfg.hidden_size
    size = batched_tokens * h * act_bytes * ACTIVATION_HIDDEN_FACTOR
    stage_moe = any(cfg.moe_layers[i] for i in range(*layers))
    stage_dense = any(not cfg.moe_layers[i] for i in range(*layers))
    if stage_moe:
        inter = (cfg.moe_intermediate_size if layout.expert_parallel
                 else -(-cfg.moe_intermediate_size // layout.tp))
        # dispatched copies of every token (top-k) and their expert intermediates
        size += batched_tokens * cfg.experts_per_token * (2 * h + 3 * inter) * act_bytes
    if stage_dense and cfg.intermediate_size:
        size += batched_tokens * 3 * -(-cfg.intermediate_size // layout.tp) * act_bytes
    if last_stage:
        vocab = -(-cfg.vocab_size // layout.tp)
        size += max_num_seqs * (1 + num_spec) * vocab * 4 * 2   # fp32 logits + probs
    return size


def hccl_communicators(layout: Layout) -> list[str]:
    groups = []
    if layout.tp > 1:
        groups.append("TP")
    if layout.pp > 1:
        groups.append("PP")
    if layout.dp > 1:
        groups.append("DP")
    if layout.expert_parallel and layout.ep_size > 1:
        groups.append("EP")
    return groups
