"""Per-NPU memory outside the weights: KV cache, recurrent state, activations, HCCL, runtime.

Numbers and their sources (see docs/planner.md for the reasoning):
- KV cache and recurrent state: laid out as the target engine's allocator does
  (kvcache.py with the release's page rule from pagerules.py: page sizes, padded pages,
  layer groups, 1 + speculative tokens state blocks per linear-attention group).
- HCCL: every device communicator takes 2 x HCCL_BUFFSIZE MB (CANN docs); one
  communicator per parallel group of size > 1 (TP, PP, DP, EP).
- Start-up: vllm-ascend refuses to start when mem_get_info's free memory is below
  gpu_memory_utilization x its total (vllm_ascend/worker/worker.py); on an idle 64 GB 910B
  free is 0.36 GiB below the total (vllm-ascend#10700: "Free memory on device (60.6/60.96
  GiB) on startup"). npu-smi counts the HBM mem_get_info does not report as used too: an
  idle 910B3 shows 3389 of 65536 MB (npu-smi fixture).
"""

from __future__ import annotations

from ascendctl.plan.kvcache import (
    DEFAULT_BLOCK_SIZE, allocate, attention_bytes_per_token, linear_state_bytes,
)
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import LINEAR, ModelConfig
from ascendctl.plan.pagerules import UPSTREAM, PageRule

GIB = 1024 ** 3
MIB = 1024 ** 2
KV_BLOCK_SIZE = DEFAULT_BLOCK_SIZE
__all__ = ["linear_state_bytes", "kv_bytes_per_token_layer", "sequence_bytes"]
HCCL_BUFFSIZE_MB_DEFAULT = 1024       # what the renderer sets (FACTS.md recipe)
IDLE_USED_BYTES = int(0.36 * GIB)  # mem_get_info total - free on an idle chip at start-up
RUNTIME_RESERVE_BYTES = 1 * GIB       # CANN context, graph-capture pools, fragmentation
ACTIVATION_HIDDEN_FACTOR = 20         # live hidden-size tensors per batched token at peak
DEFAULT_BATCHED_TOKENS = 8192         # vLLM's default --max-num-batched-tokens for serving


kv_bytes_per_token_layer = attention_bytes_per_token


def sequence_bytes(cfg: ModelConfig, layout: Layout, layers: tuple[int, int], *,
                   max_model_len: int, kv_bytes: int, dtype_bytes: int, num_spec: int,
                   mtp_layers: int, last_stage: bool = True,
                   rule: PageRule = UPSTREAM) -> dict[str, int]:
    """What one sequence of max_model_len tokens holds on one NPU of a stage, in the
    engine's blocks (kvcache.allocate): attention blocks and state blocks, each `page x
    stage group size` bytes."""
    alloc = allocate(cfg, layout, layers, last_stage=last_stage, max_model_len=max_model_len,
                     kv_bytes=kv_bytes, dtype_bytes=dtype_bytes, num_spec=num_spec,
                     mtp_layers=mtp_layers, rule=rule)
    per_layer = attention_bytes_per_token(cfg, layout, kv_bytes)
    attention_layers = sum(1 for i in range(*layers) if cfg.layer_types[i] != LINEAR) + \
        (mtp_layers if last_stage else 0)
    kv = alloc.attention_blocks * alloc.block_bytes
    state = (alloc.blocks_per_request - alloc.attention_blocks) * alloc.block_bytes
    return {"kv": kv, "state": state, "total": kv + state,
            "kv_per_token": per_layer * attention_layers,
            "attention_layers": attention_layers,
            "block_size": alloc.pages.block_size, "page_bytes": alloc.pages.page_bytes,
            "attention_page_bytes": alloc.pages.attention_page_bytes,
            "conv_state_bytes": alloc.pages.conv_bytes, "ssm_state_bytes": alloc.pages.ssm_bytes,
            "pages_aligned": int(alloc.pages.aligned),
            "group_size": alloc.stage_group_size, "kv_groups": len(alloc.groups),
            "blocks_per_sequence": alloc.blocks_per_request}


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
