"""Weight bytes held by one NPU, per pipeline stage, for a layout and a weight format.

Sharding follows vLLM: column/row-parallel Linears split over TP; k/v projections are
replicated when there are fewer KV heads than TP ranks (each rank keeps
max(1, kv_heads // tp) heads); vocabulary-parallel embeddings and lm_head pad the vocab
to a multiple of 64 and split it over TP; the router is replicated; routed experts are
split over the expert-parallel group (TP x DP) when expert parallel is on, otherwise
every expert is split over TP (and so replicated in every DP replica). Embeddings and
the vision encoder live on the first stage; the final norm, lm_head and MTP layers on
the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import LINEAR, ModelConfig
from ascendctl.plan.quant import WeightFormat

VOCAB_PADDING = 64


@dataclass(frozen=True)
class Matrix:
    part: str          # report bucket
    rows: int          # output features (whole model)
    cols: int          # input features
    shard: str         # tp | kv | vocab | experts | replicated
    quantized: bool    # stored low-precision under a quantized format
    count: int = 1     # experts: how many of them


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def attention_matrices(cfg: ModelConfig, part: str = "attention") -> list[Matrix]:
    h = cfg.hidden_size
    if cfg.mla is not None:
        m = cfg.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        mats = [Matrix(part, m.kv_lora_rank + m.qk_rope_head_dim, h, "replicated", True),
                Matrix(part, cfg.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
                       m.kv_lora_rank, "tp", True),
                Matrix(part, h, cfg.num_heads * m.v_head_dim, "tp", True),
                Matrix("norms", m.kv_lora_rank, 1, "replicated", False)]
        if m.q_lora_rank:
            mats += [Matrix(part, m.q_lora_rank, h, "replicated", True),
                     Matrix(part, cfg.num_heads * qk_head, m.q_lora_rank, "tp", True),
                     Matrix("norms", m.q_lora_rank, 1, "replicated", False)]
        else:
            mats.append(Matrix(part, cfg.num_heads * qk_head, h, "tp", True))
        return mats
    q_rows = cfg.num_heads * cfg.head_dim * (2 if cfg.attn_output_gate else 1)
    return [
        Matrix(part, q_rows, h, "tp", True),
        Matrix(part, cfg.num_kv_heads * cfg.head_dim, h, "kv", True),   # k
        Matrix(part, cfg.num_kv_heads * cfg.head_dim, h, "kv", True),   # v
        Matrix(part, h, cfg.num_heads * cfg.head_dim, "tp", True),      # o
        Matrix("norms", 2 * cfg.head_dim, 1, "replicated", False),      # q_norm, k_norm
    ]


def linear_attention_matrices(cfg: ModelConfig) -> list[Matrix]:
    la = cfg.linear
    assert la is not None
    h = cfg.hidden_size
    part = "linear_attention"
    return [
        Matrix(part, 2 * la.key_dim + 2 * la.value_dim, h, "tp", True),   # in_proj_qkvz
        Matrix(part, 2 * la.num_value_heads, h, "tp", False),             # in_proj_ba
        Matrix(part, la.conv_dim, la.conv_kernel, "tp", False),            # conv1d
        Matrix(part, 2 * la.num_value_heads, 1, "tp", False),             # A_log, dt_bias
        Matrix("norms", la.value_head_dim, 1, "replicated", False),
        Matrix(part, h, la.value_dim, "tp", True),                         # out_proj
    ]


def mlp_matrices(cfg: ModelConfig, moe: bool, *, prefix: str = "") -> list[Matrix]:
    h = cfg.hidden_size
    if not moe:
        inter = cfg.intermediate_size
        return [Matrix(prefix + "mlp", 2 * inter, h, "tp", True),
                Matrix(prefix + "mlp", h, inter, "tp", True)]
    inter = cfg.moe_intermediate_size
    mats = [
        Matrix(prefix + "router", cfg.num_experts, h, "replicated", False),
        Matrix(prefix + "experts", 2 * inter, h, "experts", True, count=cfg.num_experts),
        Matrix(prefix + "experts", h, inter, "experts", True, count=cfg.num_experts),
    ]
    shared = cfg.shared_expert_intermediate_size
    if shared:
        mats += [Matrix(prefix + "shared_expert", 2 * shared, h, "tp", True),
                 Matrix(prefix + "shared_expert", h, shared, "tp", True),
                 Matrix(prefix + "router", 1, h, "replicated", False)]  # shared_expert_gate
    return mats


def layer_matrices(cfg: ModelConfig, index: int) -> list[Matrix]:
    mixer = (linear_attention_matrices(cfg) if cfg.layer_types[index] == LINEAR
             else attention_matrices(cfg))
    norms = [Matrix("norms", 2 * cfg.hidden_size, 1, "replicated", False)]
    return mixer + mlp_matrices(cfg, cfg.moe_layers[index]) + norms


def mtp_matrices(cfg: ModelConfig) -> list[Matrix]:
    """One MTP module: fc(2h -> h), three norms and a full-attention decoder layer.

    Token embeddings and lm_head are shared with the main model (vLLM ties them)."""
    h = cfg.hidden_size
    mats: list[Matrix] = [Matrix("mtp", h, 2 * h, "tp", False),
                          Matrix("mtp", 5 * h, 1, "replicated", False)]
    for m in attention_matrices(cfg, part="mtp"):
        mats.append(m)
    moe = cfg.is_moe
    for m in mlp_matrices(cfg, moe):
        mats.append(Matrix("mtp_experts" if m.shard == "experts" else "mtp", m.rows, m.cols,
                           m.shard, m.quantized, m.count))
    return mats


def rows_per_rank(m: Matrix, cfg: ModelConfig, layout: Layout) -> tuple[int, int]:
    """(rows held by one NPU, number of copies of that shape) for a matrix."""
    tp = layout.tp
    if m.shard == "replicated":
        return m.rows, m.count
    if m.shard == "kv":
        heads = max(1, cfg.num_kv_heads // tp)
        return heads * (m.rows // cfg.num_kv_heads), m.count
    if m.shard == "vocab":
        padded = _ceil_div(m.rows, VOCAB_PADDING) * VOCAB_PADDING
        return _ceil_div(padded, tp), m.count
    if m.shard == "experts":
        if layout.expert_parallel:
            return m.rows, _ceil_div(m.count, layout.ep_size)
        return _ceil_div(m.rows, tp), m.count
    return _ceil_div(m.rows, tp), m.count


def matrices_bytes(mats: list[Matrix], cfg: ModelConfig, layout: Layout,
                   fmt: WeightFormat) -> dict[str, float]:
    by_part: dict[str, float] = {}
    for m in mats:
        rows, copies = rows_per_rank(m, cfg, layout)
        size = copies * fmt.matrix_bytes(rows, m.cols, quantized=m.quantized,
                                         expert=m.shard == "experts")
        by_part[m.part] = by_part.get(m.part, 0.0) + size
    return by_part


def stage_weight_bytes(cfg: ModelConfig, layout: Layout, fmt: WeightFormat,
                       stage: int, layers: tuple[int, int], *, with_mtp: bool
                       ) -> dict[str, float]:
    """Bytes per NPU of one pipeline stage, by part (embed, attention, experts, ...)."""
    first, last = stage == 0, stage == layout.pp - 1
    mats: list[Matrix] = []
    vocab = Matrix("embed", cfg.vocab_size, cfg.hidden_size, "vocab", False)
    if first:
        mats.append(vocab)
        if cfg.vision is not None:
            mats.append(Matrix("vision", cfg.vision.params(), 1, "tp", False))
    for index in range(*layers):
        mats.extend(layer_matrices(cfg, index))
    if last:
        mats.append(Matrix("norms", cfg.hidden_size, 1, "replicated", False))
        if not (cfg.tie_word_embeddings and first):
            mats.append(Matrix("lm_head", cfg.vocab_size, cfg.hidden_size, "vocab", False))
        if with_mtp:
            for _ in range(cfg.mtp_layers):
                mats.extend(mtp_matrices(cfg))
    return matrices_bytes(mats, cfg, layout, fmt)


def total_params(cfg: ModelConfig, *, with_mtp: bool = True) -> int:
    """Parameter count of the whole checkpoint (a sanity number for the report)."""
    mats: list[Matrix] = [Matrix("embed", cfg.vocab_size, cfg.hidden_size, "vocab", False)]
    if not cfg.tie_word_embeddings:
        mats.append(Matrix("lm_head", cfg.vocab_size, cfg.hidden_size, "vocab", False))
    if cfg.vision is not None:
        mats.append(Matrix("vision", cfg.vision.params(), 1, "tp", False))
    for index in range(cfg.num_layers):
        mats.extend(layer_matrices(cfg, index))
    if with_mtp:
        for _ in range(cfg.mtp_layers):
            mats.extend(mtp_matrices(cfg))
    return sum(m.rows * m.cols * m.count for m in mats) + cfg.hidden_size
