"""How vLLM's allocator lays out the KV cache, so the planner counts sequences as vLLM does.

A pinned copy of the formulas of vLLM 0.17 (the version vllm-ascend v0.17.0rc1 pins, see
FACTS.md "KV cache for hybrid models"), each function naming the one it follows:

1. Page sizes (`model_executor/models/config.py`,
   `HybridAttentionMambaModelConfig.verify_and_update_config`): a full-attention page holds
   `block_size` tokens of K and V; a linear-attention (Gated DeltaNet) page holds one
   sequence's whole recurrent state (`MambaSpec.page_size_bytes`, shapes from
   `model_executor/layers/mamba/mamba_utils.py` `gated_delta_net_state_shape`, whose conv
   state grows by the speculative tokens). For a hybrid model the attention block size is
   raised to `kernel_block_alignment_size * cdiv(mamba_page, alignment * attn_page_1_token)`
   (alignment 16 for full attention, 64 for MLA) and the state page is padded to exactly
   the attention page (`cache_config.mamba_page_size_padded`).
2. Groups (`v1/core/kv_cache_utils.py`, `_get_kv_cache_groups_uniform_page_size`): layers
   of one kind are cut into groups of `group_size` layers, the fewest layers of any kind
   (or the most, when max < 1.25 x min); the MTP drafter's attention layer counts with the
   attention layers; a kind's layers are dealt out to its groups in turn. Layer i of
   every group shares one tensor, so a block costs
   `page x group_size` bytes (`get_kv_cache_config_from_groups`: num_blocks =
   memory // page // group_size).
3. Blocks per request (`v1/core/single_type_kv_cache_manager.py`; `max_memory_usage_bytes`
   of each spec in `v1/kv_cache_interface.py`): an attention group needs
   `cdiv(max_model_len, block_size)` blocks; a linear-attention group needs
   `1 + num_speculative_tokens` blocks (`MambaSpec.num_speculative_blocks`, set from the
   speculative config in `model_executor/layers/mamba/abstract.py` `get_kv_cache_spec`).
   Concurrency = num_blocks / blocks per request (`get_max_concurrency_for_kv_cache_config`).

Without linear-attention layers this is the classic count: one group, 128-token blocks
(vllm-ascend's default block size).
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import DTYPE_BYTES, LINEAR, SLIDING, ModelConfig

DEFAULT_BLOCK_SIZE = 128          # vllm-ascend's cache_config.block_size
ATTENTION_ALIGNMENT = 16          # kernel_block_alignment_size, full attention (vLLM 0.17)
MLA_ALIGNMENT = 64                # kernel_block_alignment_size, MLA backends other than CUTLASS
GROUP_BALANCE = 1.25              # _get_kv_cache_groups_uniform_page_size's "magic number"
MTP = "mtp_attention"             # the drafter's attention layer (same spec as full attention)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention_bytes_per_token(cfg: ModelConfig, layout: Layout, kv_bytes: int) -> int:
    """FullAttentionSpec(block_size=1).page_size_bytes: K and V of the KV heads a rank holds
    (replicated when TP exceeds the KV heads); MLA keeps one latent, not split by TP."""
    if cfg.mla is not None:
        return (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes
    heads = max(1, cfg.num_kv_heads // layout.tp)
    return 2 * heads * cfg.head_dim * kv_bytes


def linear_state_bytes(cfg: ModelConfig, layout: Layout, dtype_bytes: int,
                       num_spec: int) -> int:
    """MambaSpec.page_size_bytes (unpadded) of one Gated DeltaNet layer: the conv state
    (conv_dim / tp) x (conv_kernel - 1 + num_spec) in the model dtype plus the SSM state
    (value_heads / tp) x value_dim x key_dim in mamba_ssm_dtype
    (mamba_utils.gated_delta_net_state_shape)."""
    la = cfg.linear
    if la is None:
        return 0
    conv = (la.conv_kernel - 1 + num_spec) * (la.conv_dim // layout.tp) * dtype_bytes
    ssm_bytes = DTYPE_BYTES.get(la.ssm_state_dtype or "", dtype_bytes)
    ssm = (la.num_value_heads // layout.tp) * la.key_head_dim * la.value_head_dim * ssm_bytes
    return conv + ssm


@dataclass(frozen=True)
class Pages:
    block_size: int              # tokens per attention block
    page_bytes: int              # one block of one layer (attention and padded state alike)
    attention_token_bytes: int
    state_bytes: int             # unpadded linear-attention state (0 without such layers)


def pages(cfg: ModelConfig, layout: Layout, *, kv_bytes: int, dtype_bytes: int,
          num_spec: int) -> Pages:
    """HybridAttentionMambaModelConfig.verify_and_update_config (vLLM 0.17)."""
    per_token = attention_bytes_per_token(cfg, layout, kv_bytes)
    block_size = DEFAULT_BLOCK_SIZE
    state = linear_state_bytes(cfg, layout, dtype_bytes, num_spec) if cfg.linear else 0
    if state and LINEAR in cfg.layer_types:
        alignment = MLA_ALIGNMENT if cfg.mla is not None else ATTENTION_ALIGNMENT
        needed = alignment * cdiv(state, alignment * per_token)
        block_size = max(block_size, needed)
    return Pages(block_size, block_size * per_token, per_token, state)


@dataclass(frozen=True)
class Group:
    kind: str                    # FULL/SLIDING attention or LINEAR
    layers: tuple[int | str, ...]  # layer indices; "mtp<i>" for drafter layers


def layer_kinds(cfg: ModelConfig, mtp_layers: int) -> list[tuple[int | str, str]]:
    kinds: list[tuple[int | str, str]] = [(i, kind) for i, kind in enumerate(cfg.layer_types)]
    kinds += [(f"mtp{i}", MTP) for i in range(mtp_layers)]
    return kinds


def spec_key(kind: str, cfg: ModelConfig) -> str:
    """Layers whose KVCacheSpec compares equal: the drafter's full attention is the same
    spec as the model's; a sliding layer without a window is full attention."""
    if kind == MTP or (kind == SLIDING and not cfg.sliding_window):
        return "full_attention"
    return kind


def kv_cache_groups(cfg: ModelConfig, mtp_layers: int) -> list[Group]:
    """_get_kv_cache_groups_uniform_page_size (kv_cache_utils.py, vLLM 0.17); a model of
    one kind is one group (_get_kv_cache_groups_uniform_spec)."""
    same_type: dict[str, list[int | str]] = {}
    for layer, kind in layer_kinds(cfg, mtp_layers):
        same_type.setdefault(spec_key(kind, cfg), []).append(layer)
    if len(same_type) == 1:
        (kind, layers), = same_type.items()
        return [Group(kind, tuple(layers))]
    counts = [len(layers) for layers in same_type.values()]
    group_size = min(counts)
    if max(counts) < min(counts) * GROUP_BALANCE:
        group_size = max(counts)
    groups = []
    for kind, layers in same_type.items():
        # strided, as vLLM does, so that every pipeline stage holds layers of each group:
        # (sw.0, sw.1, sw.2) in groups of 2 -> (sw.0, sw.2), (sw.1)
        num_groups = cdiv(len(layers), group_size)
        for index in range(num_groups):
            groups.append(Group(kind, tuple(layers[index::num_groups])))
    return groups


def blocks_per_request(group: Group, *, max_model_len: int, block_size: int, num_spec: int,
                       sliding_window: int | None) -> int:
    """What one request of max_model_len tokens holds of a group at most (each spec's
    max_memory_usage_bytes / page size)."""
    if group.kind == LINEAR:
        return 1 + num_spec
    if group.kind == SLIDING and sliding_window:
        return cdiv(min(max_model_len, sliding_window), block_size) + 1
    return cdiv(max_model_len, block_size)


@dataclass(frozen=True)
class Allocation:
    """The KV cache of one pipeline stage as vLLM lays it out."""

    pages: Pages
    groups: list[Group]
    stage_group_size: int        # tensors on this stage: most layers any group holds here
    blocks_per_request: int      # over every group (the scheduler allocates them all)
    attention_blocks: int        # of which attention
    num_spec: int

    @property
    def block_bytes(self) -> int:
        return self.pages.page_bytes * self.stage_group_size

    @property
    def bytes_per_request(self) -> int:
        return self.blocks_per_request * self.block_bytes

    def max_requests(self, kv_budget: float) -> int:
        """num_blocks = budget // page // group_size; concurrency = num_blocks // blocks
        per request."""
        if kv_budget <= 0:
            return 0
        if self.block_bytes <= 0 or self.blocks_per_request <= 0:
            return 1 << 30
        num_blocks = int(kv_budget // self.pages.page_bytes // self.stage_group_size)
        return num_blocks // self.blocks_per_request


def allocate(cfg: ModelConfig, layout: Layout, stage_layers: tuple[int, int], *,
             last_stage: bool, max_model_len: int, kv_bytes: int, dtype_bytes: int,
             num_spec: int, mtp_layers: int) -> Allocation:
    page = pages(cfg, layout, kv_bytes=kv_bytes, dtype_bytes=dtype_bytes, num_spec=num_spec)
    groups = kv_cache_groups(cfg, mtp_layers)
    here: set[int | str] = set(range(*stage_layers))
    if last_stage:
        here |= {f"mtp{i}" for i in range(mtp_layers)}
    stage_group_size = max((sum(1 for layer in g.layers if layer in here) for g in groups),
                           default=0)
    attention = 0
    total = 0
    for group in groups:
        count = blocks_per_request(group, max_model_len=max_model_len,
                                   block_size=page.block_size, num_spec=num_spec,
                                   sliding_window=cfg.sliding_window)
        total += count
        if group.kind != LINEAR:
            attention += count
    return Allocation(page, groups, stage_group_size, total, attention, num_spec)
