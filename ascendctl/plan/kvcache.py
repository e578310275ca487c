"""How the engine's allocator lays out the KV cache, so the planner counts sequences as the
engine does.

Pinned copies of the formulas, each function naming the one it follows; the block/page rule
is per release (pagerules.py: upstream vLLM for the plain vLLM build, vllm-ascend's own for
an NPU stack):

1. Page sizes. Upstream (`HybridAttentionMambaModelConfig.verify_and_update_config`, vLLM
   0.17): a full-attention page holds `block_size` tokens of K and V; a linear-attention
   (Gated DeltaNet) page holds one sequence's whole recurrent state (`MambaSpec`, shapes
   from `mamba_utils.gated_delta_net_state_shape`, whose conv state grows by the speculative
   tokens). The attention block is raised to `alignment x cdiv(state, alignment x K+V bytes
   per token)` and the state page is padded to the attention page. vllm-ascend v0.16.0rc1 -
   v0.29.x (`vllm_ascend/patch/platform/patch_mamba_config.py`) size the block from the
   K-only page so that one block of K equals the SSM state (asserted), then pad every page up
   to the K+V page + the conv state (`worker/model_runner_v1.py`, `page_size_padded`);
   v0.30.0rc1 and later leave it to vLLM's `Platform._align_hybrid_block_size` with the
   Ascend kernel block 128 (the upstream formula, alignment 128). Every page of a layout is
   then the same size, so vLLM's grouping below takes its uniform-page path: its other path
   for mixed page sizes (`_get_packed_kv_cache_groups`, vLLM >= 0.29) needs a
   block-outermost KV cache layout, and vllm-ascend's backends declare none, which resolves
   to LBNHC.
2. Groups (`v1/core/kv_cache_utils.py`, `_get_kv_cache_groups_uniform_page_size`): layers
   of one kind are cut into groups of `group_size` layers, the fewest layers of any kind
   (or the most, when max < balance x min; 1.25 up to vLLM 0.17, 1.5 later); the MTP
   drafter's attention layer counts with the attention layers; a kind's layers are dealt
   out to its groups in turn. Layer i of every group shares one tensor, so a block costs
   `page x group_size` bytes (`get_kv_cache_config_from_groups`: num_blocks =
   memory // page // group_size up to vLLM 0.28; memory // the largest group's sum of
   pages from vLLM 0.29, the same figure with one page size).
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
from ascendctl.plan.pagerules import K_ONLY, UPSTREAM, PageRule

DEFAULT_BLOCK_SIZE = 128          # vllm-ascend's cache_config.block_size
MTP = "mtp_attention"             # the drafter's attention layer (same spec as full attention)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_heads_per_rank(cfg: ModelConfig, layout: Layout) -> int:
    """ModelConfig.get_num_kv_heads: KV heads split over TP, replicated beyond them."""
    return max(1, cfg.num_kv_heads // layout.tp)


def attention_bytes_per_token(cfg: ModelConfig, layout: Layout, kv_bytes: int) -> int:
    """FullAttentionSpec(block_size=1).page_size_bytes: K and V of the KV heads a rank holds
    (replicated when TP exceeds the KV heads); MLA keeps one latent, not split by TP."""
    if cfg.mla is not None:
        return (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes
    return 2 * kv_heads_per_rank(cfg, layout) * cfg.head_dim * kv_bytes


def linear_state_parts(cfg: ModelConfig, layout: Layout, dtype_bytes: int,
                       num_spec: int) -> tuple[int, int]:
    """(conv, SSM) bytes of one Gated DeltaNet layer's state on a rank: conv
    (conv_dim / tp) x (conv_kernel - 1 + num_spec) in the model dtype, SSM
    (value_heads / tp) x value_dim x key_dim in mamba_ssm_dtype
    (mamba_utils.gated_delta_net_state_shape)."""
    la = cfg.linear
    if la is None:
        return 0, 0
    conv = (la.conv_kernel - 1 + num_spec) * (la.conv_dim // layout.tp) * dtype_bytes
    ssm_bytes = DTYPE_BYTES.get(la.ssm_state_dtype or "", dtype_bytes)
    ssm = (la.num_value_heads // layout.tp) * la.key_head_dim * la.value_head_dim * ssm_bytes
    return conv, ssm


def linear_state_bytes(cfg: ModelConfig, layout: Layout, dtype_bytes: int,
                       num_spec: int) -> int:
    """MambaSpec.page_size_bytes (unpadded) of one Gated DeltaNet layer."""
    return sum(linear_state_parts(cfg, layout, dtype_bytes, num_spec))


@dataclass(frozen=True)
class Pages:
    block_size: int              # tokens per attention block
    page_bytes: int              # one block of one layer (attention and padded state alike)
    attention_token_bytes: int   # K+V of one token
    state_bytes: int             # unpadded linear-attention state (0 without such layers)
    conv_bytes: int = 0          # of which the conv state
    ssm_bytes: int = 0           # of which the SSM (temporal) state
    attention_page_bytes: int = 0  # block_size x K+V bytes, before any padding
    aligned: bool = True         # False: vllm-ascend's "Cannot align ssm_page_size" assert


def pages(cfg: ModelConfig, layout: Layout, *, kv_bytes: int, dtype_bytes: int,
          num_spec: int, rule: PageRule = UPSTREAM) -> Pages:
    """The attention block size and the common page of a layout under `rule`."""
    per_token = attention_bytes_per_token(cfg, layout, kv_bytes)
    conv, ssm = linear_state_parts(cfg, layout, dtype_bytes, num_spec)
    state = conv + ssm
    if not state or LINEAR not in cfg.layer_types:
        page = DEFAULT_BLOCK_SIZE * per_token
        return Pages(DEFAULT_BLOCK_SIZE, page, per_token, state, conv, ssm, page)
    if rule.kind == K_ONLY:
        return _k_only_pages(cfg, layout, kv_bytes, per_token, conv, ssm, rule)
    return _whole_pages(cfg, per_token, conv, ssm, rule)


def _whole_pages(cfg: ModelConfig, per_token: int, conv: int, ssm: int,
                 rule: PageRule) -> Pages:
    """Upstream HybridAttentionMambaModelConfig.verify_and_update_config (vLLM 0.17) and
    Platform._align_hybrid_block_size (later), with alignment 128 for vllm-ascend
    v0.14.0rc1-v0.15.x and >= v0.30.0rc1: one K+V block covers the whole state, the state is
    padded to it."""
    state = conv + ssm
    alignment = rule.mla_alignment if cfg.mla is not None else rule.alignment
    block = max(DEFAULT_BLOCK_SIZE, alignment * cdiv(state, alignment * per_token))
    page = block * per_token
    return Pages(block, page, per_token, state, conv, ssm, page)


def _k_only_pages(cfg: ModelConfig, layout: Layout, kv_bytes: int, per_token: int,
                  conv: int, ssm: int, rule: PageRule) -> Pages:
    """vllm-ascend v0.16.0rc1-v0.29.x, patch_mamba_config.verify_and_update_config: the larger
    of the two state tensors is the "SSM page", the smaller the "conv page"; the attention
    block is the smallest multiple of 128 tokens whose K-only page covers the SSM page (and
    must equal it); the attention page (K+V) plus the conv page is the padded state page,
    and model_runner_v1.get_kv_cache_spec pads every smaller attention page up to it."""
    ssm_page, conv_page = max(conv, ssm), min(conv, ssm)
    if cfg.mla is None:
        k_token = kv_heads_per_rank(cfg, layout) * cfg.head_dim * kv_bytes
    elif rule.mla_branch:
        # v0.19.1rc1+: K page = kv_lora_rank, token page = kv_lora_rank + rope (1 KV head)
        k_token = cfg.mla.kv_lora_rank * kv_bytes
    else:
        # before v0.19.1rc1 the head size of an MLA model (kv_lora_rank + rope) is used as
        # written, and the attention page counts it twice (K and V)
        k_token = (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes
        per_token = 2 * k_token
    block = rule.alignment * cdiv(ssm_page, rule.alignment * k_token)
    attention_page = block * per_token
    return Pages(block, attention_page + conv_page, per_token, conv + ssm, conv, ssm,
                 attention_page, aligned=k_token * block == ssm_page)


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


def kv_cache_groups(cfg: ModelConfig, mtp_layers: int,
                    balance: float = UPSTREAM.group_balance) -> list[Group]:
    """_get_kv_cache_groups_uniform_page_size (kv_cache_utils.py); a model of one kind is
    one group (_get_kv_cache_groups_uniform_spec)."""
    same_type: dict[str, list[int | str]] = {}
    for layer, kind in layer_kinds(cfg, mtp_layers):
        same_type.setdefault(spec_key(kind, cfg), []).append(layer)
    if len(same_type) == 1:
        (kind, layers), = same_type.items()
        return [Group(kind, tuple(layers))]
    counts = [len(layers) for layers in same_type.values()]
    group_size = min(counts)
    if max(counts) < min(counts) * balance:
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
             num_spec: int, mtp_layers: int, rule: PageRule = UPSTREAM) -> Allocation:
    page = pages(cfg, layout, kv_bytes=kv_bytes, dtype_bytes=dtype_bytes, num_spec=num_spec,
                 rule=rule)
    groups = kv_cache_groups(cfg, mtp_layers, rule.group_balance)
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
