"""Which pipeline stage needs each tensor, and which stages each node runs.

Layer split: `ascendctl.plan.pp_split` (vLLM's `get_pp_indices`, including
`VLLM_PP_LAYER_PARTITION`). Around the decoder layers, vLLM builds:

    embed_tokens            first stage; also the last when the embeddings are tied
                            (the last stage's lm_head *is* the embedding) or when an MTP
                            drafter runs there (it shares the embedding)
    final norm, lm_head     last stage
    mtp.*, layers >= L      last stage (the MTP drafter runs after the last layer)
    model.visual.*          first stage (the vision encoder feeds the embeddings)
    anything else           every stage (unknown to us: never leave a stage without it)

Nodes and stages (mp mode): vLLM numbers ranks tp-fastest, so global rank r is in
pipeline stage (r // tp) % pp; with `--nnodes N` node i runs ranks
i*(tp*pp/N) ... (i+1)*(tp*pp/N)-1. TP1 × PP2 on 2 nodes: node 0 = stage 0,
node 1 = stage 1. TP8 × PP2 on 2 nodes: the same. TP4 × PP2 on 1 node: stages {0, 1}.
Data-parallel mode puts whole replicas on each node and Ray places ranks itself:
both need the whole directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascendctl.plan.pp_split import stage_ranges

LAYER_RE = re.compile(r"^(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\.")
EMBED_RE = re.compile(r"^(?:model\.)?(?:language_model\.)?(?:model\.)?embed_tokens\.")
NORM_RE = re.compile(r"^(?:model\.)?(?:language_model\.)?(?:model\.)?norm\.")
LM_HEAD_RE = re.compile(r"^(?:model\.)?(?:language_model\.)?lm_head\.")
MTP_RE = re.compile(r"^(?:model\.)?mtp\.")
VISUAL_RE = re.compile(r"^(?:model\.)?visual\.")


@dataclass(frozen=True)
class TensorRole:
    kind: str                 # layer | embed | norm | lm_head | mtp | visual | other
    layer: int | None = None


def classify(name: str) -> TensorRole:
    match = LAYER_RE.match(name)
    if match:
        return TensorRole("layer", int(match.group(1)))
    for kind, pattern in (("mtp", MTP_RE), ("visual", VISUAL_RE), ("embed", EMBED_RE),
                          ("norm", NORM_RE), ("lm_head", LM_HEAD_RE)):
        if pattern.match(name):
            return TensorRole(kind)
    return TensorRole("other")


@dataclass(frozen=True)
class StageSplit:
    num_layers: int
    pp: int
    ranges: tuple[tuple[int, int], ...]
    embed_on_last: bool

    @classmethod
    def build(cls, num_layers: int, pp: int, partition: str | None = None, *,
              embed_on_last: bool = False) -> "StageSplit":
        ranges = tuple(stage_ranges(num_layers, pp, partition))
        return cls(num_layers, pp, ranges, embed_on_last)

    def stage_of_layer(self, layer: int) -> int:
        for stage, (start, end) in enumerate(self.ranges):
            if start <= layer < end:
                return stage
        return self.pp - 1     # beyond the decoder stack: MTP layers (DeepSeek-style numbering)

    def stages_of(self, name: str) -> frozenset[int]:
        role = classify(name)
        last = self.pp - 1
        if role.kind == "layer" and role.layer is not None:
            return frozenset({self.stage_of_layer(role.layer)})
        if role.kind in ("embed",):
            return frozenset({0, last}) if self.embed_on_last else frozenset({0})
        if role.kind == "visual":
            return frozenset({0})
        if role.kind in ("norm", "lm_head", "mtp"):
            return frozenset({last})
        return frozenset(range(self.pp))


def node_stages(*, mode: str, tp: int, pp: int, nnodes: int,
                node_rank: int) -> frozenset[int] | None:
    """The pipeline stages a node runs, or None when it needs the whole model."""
    if mode != "mp" or pp == 1:
        return None
    world = tp * pp
    per_node = world // nnodes
    ranks = range(node_rank * per_node, (node_rank + 1) * per_node)
    return frozenset((rank // tp) % pp for rank in ranks)
