"""Which KV-cache block/page rule the target engine applies to hybrid (attention + Gated
DeltaNet) models, per release.

Upstream vLLM raises the attention block until one block's K+V page covers a whole
linear-attention state and pads the state up to that page
(`HybridAttentionMambaModelConfig.verify_and_update_config`, vLLM 0.17; moved to
`Platform._align_hybrid_block_size` in later releases). vllm-ascend v0.16.0rc1-v0.29.x
replace that hook (`vllm_ascend/patch/platform/patch_mamba_config.py`; `NPUPlatform.
update_block_size_for_backend` does not call vLLM's) and pad the attention specs
(`vllm_ascend/worker/model_runner_v1.py`, `get_kv_cache_spec`, `page_size_padded`);
v0.30.0rc1 hands the alignment back to vLLM's hook (`NPUPlatform.update_block_size_for_
backend` calls it; the patch keeps only the sparse index-kpool branch).

Read: every tag of the vllm-ascend repository from v0.14.0rc1 to v0.25.1rc1, and the PyPI
sdists of every release from 0.17.0rc1 to 0.30.0rc2 with the vLLM sdist each is paired
with (releases/data/release_sets.yaml); rows change where the rule changes. A release newer
than every one read uses the newest rule and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.facts.versions import Version, parse_version, try_parse_version

K_ONLY = "k_only"      # vllm-ascend v0.16.0rc1 - v0.29.x
WHOLE = "whole"        # upstream vLLM; vllm-ascend v0.14.0rc1-v0.15.x and >= v0.30.0rc1

# vLLM's `_get_kv_cache_groups_uniform_page_size` uses the largest layer count as the group
# size when it is below `min x balance`: 1.25 up to vLLM 0.17, 1.5 since vLLM PR #36684
# (merged 2026-03-10; vLLM 0.18.0 was published 2026-03-20; 1.5 in every vLLM sdist from
# 0.23.0 to 0.32.0).
BALANCE_VLLM_017 = 1.25
BALANCE_VLLM_018 = 1.5

# Every release whose patch_mamba_config.py and model_runner_v1.py padding were read: git
# tags up to v0.25.1rc1, PyPI sdists from 0.17.0rc1 to 0.30.0rc2.
CHECKED_RELEASES = ("0.14.0rc1", "0.15.0rc1", "0.16.0rc1", "0.17.0rc1", "0.18.0rc1", "0.18.0",
                    "0.19.1rc1", "0.20.2rc1", "0.21.0rc1", "0.22.1rc1", "0.23.0rc1", "0.23.0",
                    "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.27.1rc1",
                    "0.28.0rc1", "0.29.0rc1", "0.30.0rc1", "0.30.0rc2")


@dataclass(frozen=True)
class PageRule:
    name: str
    kind: str                    # K_ONLY or WHOLE
    alignment: int               # tokens an attention block is a multiple of
    mla_alignment: int           # the same for MLA attention (WHOLE only)
    mla_branch: bool             # K_ONLY: MLA's K page is kv_lora_rank (v0.19.1rc1+)
    group_balance: float
    first: str | None            # first vllm-ascend release with this rule (None: upstream)
    until: str | None            # first release without it (None: still current)
    summary: str
    sources: tuple[str, ...]

    def covers(self, version: Version) -> bool:
        if self.first is None:
            return False
        if version < parse_version(self.first):
            return False
        return self.until is None or version < parse_version(self.until)


UPSTREAM = PageRule(
    name="vllm-upstream", kind=WHOLE, alignment=16, mla_alignment=64, mla_branch=True,
    group_balance=BALANCE_VLLM_018, first=None, until=None,
    summary="attention block = 16 x cdiv(state, 16 x K+V bytes per token) (MLA: 64), at "
            "least 128; the state page is padded up to the attention page",
    sources=("vllm model_executor/models/config.py HybridAttentionMambaModelConfig (0.17)",
             "vllm platforms/interface.py _align_hybrid_block_size (0.32)",
             "vllm v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size (0.32)"))

_PATCH = "vllm_ascend/patch/platform/patch_mamba_config.py"
_RUNNER = "vllm_ascend/worker/model_runner_v1.py get_kv_cache_spec (page_size_padded)"
_PLATFORM = "vllm_ascend/platform.py NPUPlatform.update_block_size_for_backend"
_K_ONLY_SUMMARY = ("kernel block 128; attention block = 128 x cdiv(SSM state page, 128 x "
                   "K-only bytes per token), which must equal the SSM page exactly; every "
                   "page (attention and state) is padded up to the K+V page + the conv state")

ASCEND_RULES: tuple[PageRule, ...] = (
    PageRule(
        name="vllm-ascend-whole-page-128", kind=WHOLE, alignment=128, mla_alignment=128,
        mla_branch=True, group_balance=BALANCE_VLLM_017, first="0.14.0rc1",
        until="0.16.0rc1",
        summary="attention block = 128 x cdiv(state, 128 x K+V bytes per token); the state "
                "page is padded up to the attention page",
        sources=(f"{_PATCH} @ v0.14.0rc1, v0.15.0rc1",)),
    PageRule(
        name="vllm-ascend-k-page", kind=K_ONLY, alignment=128, mla_alignment=128,
        mla_branch=False, group_balance=BALANCE_VLLM_017, first="0.16.0rc1",
        until="0.18.0rc1", summary=_K_ONLY_SUMMARY,
        sources=(f"{_PATCH} @ v0.16.0rc1, v0.17.0rc1", f"{_RUNNER} @ v0.17.0rc1",
                 "vllm-project/vllm-ascend#7393 (Qwen3.5-35B TP8: attn_block_size=512 "
                 "ssm_block_page_size=262144 conv_block_page_size=12288)",
                 "docs/source/user_guide/release_notes.md v0.17.0rc1 (tp 2: block_size "
                 "2048)")),
    PageRule(
        name="vllm-ascend-k-page", kind=K_ONLY, alignment=128, mla_alignment=128,
        mla_branch=False, group_balance=BALANCE_VLLM_018, first="0.18.0rc1",
        until="0.19.1rc1", summary=_K_ONLY_SUMMARY,
        sources=(f"{_PATCH} @ v0.18.0rc1, v0.18.0 (as v0.17.0rc1 but the logger import)",
                 f"{_RUNNER} @ v0.18.0")),
    PageRule(
        name="vllm-ascend-k-page-mla", kind=K_ONLY, alignment=128, mla_alignment=128,
        mla_branch=True, group_balance=BALANCE_VLLM_018, first="0.19.1rc1",
        until="0.28.0rc1",
        summary=_K_ONLY_SUMMARY + "; MLA's K page is kv_lora_rank, its token page "
                "kv_lora_rank + rope",
        sources=(f"{_PATCH} @ v0.19.1rc1 (MLA branch), v0.20.2rc1, v0.21.0rc1; identical "
                 "from v0.22.1rc1 to sdist 0.27.1rc1 (v0.22.1rc1, v0.23.0rc1, v0.23.0, "
                 "sdist 0.23.0.post1, v0.24.0rc1, v0.25.1rc1, sdist 0.26.0rc1, sdist "
                 "0.27.1rc1)",
                 f"{_RUNNER} @ the same releases; {_PLATFORM} does not call vLLM's")),
    PageRule(
        name="vllm-ascend-k-page-kpool", kind=K_ONLY, alignment=128, mla_alignment=128,
        mla_branch=True, group_balance=BALANCE_VLLM_018, first="0.28.0rc1",
        until="0.30.0rc1",
        summary=_K_ONLY_SUMMARY + "; MLA's K page is kv_lora_rank; sparse index-kpool "
                "models (index_topk + index_kpool) take a branch of their own, not modelled",
        sources=(f"{_PATCH} @ sdist 0.28.0rc1, 0.29.0rc1 (identical): lines 110-141, the "
                 "K-page block unless _get_sparse_index_kpool; lines 143-157, the K+V page + "
                 "conv page",
                 f"{_RUNNER} @ sdist 0.28.0rc1, 0.29.0rc1; {_PLATFORM} does not call "
                 "vLLM's")),
    PageRule(
        name="vllm-ascend-vllm-aligned", kind=WHOLE, alignment=128, mla_alignment=128,
        mla_branch=True, group_balance=BALANCE_VLLM_018, first="0.30.0rc1", until=None,
        summary="vLLM's Platform._align_hybrid_block_size with the Ascend attention "
                "backend's kernel block 128: attention block = 128 x cdiv(conv + SSM "
                "state, 128 x K+V bytes per token) (MLA: the latent + rope per token); "
                "the state page is padded up to the attention page",
        sources=(f"{_PLATFORM} @ sdist 0.30.0rc1, 0.30.0rc2: calls vLLM's "
                 "(super().update_block_size_for_backend); vllm platforms/interface.py "
                 "update_block_size_for_backend, _align_hybrid_block_size @ sdist 0.30.0",
                 f"{_PATCH} @ sdist 0.30.0rc1, 0.30.0rc2: aligns only sparse index-kpool "
                 "models ('without forcing attention and Mamba cache page sizes to be "
                 "equal')",
                 "vllm_ascend/attention/attention_v1.py get_supported_kernel_block_sizes "
                 "[128] @ sdist 0.30.0rc1; vllm_ascend/utils.py refresh_block_size 'Hybrid "
                 "page padding is handled by the upstream cache planner'",
                 f"{_RUNNER} @ sdist 0.30.0rc1 (pads attention pages to the state page: "
                 "already equal)")),
)


@dataclass(frozen=True)
class RuleChoice:
    """The rule a plan uses, and why."""

    rule: PageRule
    engine: str                  # "vllm-ascend" or "vllm"
    release: str | None          # the pinned vllm_ascend version
    checked: bool                # the release itself was read (not only its neighbours)
    note: str = ""

    def describe(self) -> str:
        target = f"vllm-ascend {self.release}" if self.release else self.engine
        text = f"{target}: {self.rule.summary} ({'; '.join(self.rule.sources[:2])})"
        return f"{text}. {self.note}" if self.note else text

    def as_dict(self) -> dict:
        return {"engine": self.engine, "release": self.release, "rule": self.rule.name,
                "summary": self.rule.summary, "sources": list(self.rule.sources),
                "release_checked": self.checked, "note": self.note}


def _checked(version: Version) -> bool:
    return any(version == parse_version(tag) for tag in CHECKED_RELEASES)


def rule_for(vllm_ascend: str | None, *, npu_stack: bool = False) -> RuleChoice:
    """The rule of the target release: `versions.vllm_ascend` when pinned; upstream vLLM's
    when no NPU stack is pinned (the lab's CPU build); the newest vllm-ascend rule when
    only torch_npu names an NPU stack."""
    newest = ASCEND_RULES[-1]
    version = try_parse_version(vllm_ascend)
    if version is None:
        if npu_stack:
            return RuleChoice(newest, "vllm-ascend", None, False,
                              "versions.vllm_ascend is not pinned but torch_npu is: planned "
                              "with the newest known vllm-ascend rule")
        return RuleChoice(UPSTREAM, "vllm", None, True)
    for rule in ASCEND_RULES:
        if rule.covers(version):
            if _checked(version):
                return RuleChoice(rule, "vllm-ascend", vllm_ascend, True)
            newest_checked = max(parse_version(t) for t in CHECKED_RELEASES)
            if version > newest_checked:
                return RuleChoice(rule, "vllm-ascend", vllm_ascend, False,
                                  f"v{version} is newer than every release checked (newest: "
                                  f"v{newest_checked}): planned with the newest known rule")
            return RuleChoice(rule, "vllm-ascend", vllm_ascend, False,
                              f"v{version} itself was not read; the checked releases "
                              "around it share this rule")
    oldest = ASCEND_RULES[0]
    return RuleChoice(oldest, "vllm-ascend", vllm_ascend, False,
                      f"v{version} is older than every release checked (oldest: "
                      f"v{oldest.first}): planned with the oldest known rule")
