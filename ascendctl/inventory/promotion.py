"""`slo.promotion`: the evidence a new release must give before it is promoted
(docs/promotion.md). Only the thresholds live here; the judgments are in
ascendctl/promotion/.

    promotion:
      throughput_ratio: 0.97     # new / previous output throughput, at least
      p99_ratio: 1.05            # new / previous p99 TTFT and p99 TPOT, at most
      rounds: 12                 # paired bench rounds per release
      confidence: 0.99           # of the whole comparison (every figure together)
      long_tail_requests: 1000
      long_tail_max_increase: 0.005
      soak_s: 7200
      gates: [regression, long_tail, envelope, soak]
      profile: {input_len: 512, output_len: 256, concurrency: 8, prompts_per_round: 32}
      envelope: {enabled: true}
"""

from __future__ import annotations

import math
import os
from typing import Literal, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from ascendctl.inventory.model import Section
from ascendctl.inventory.prompts import PromptSet, load_prompt_file, prompt_file_path

# throughput, p99 TTFT and p99 TPOT are compared at once: each gets a third of the error
COMPARED_FIGURES = 3


def rounds_needed(confidence: float, figures: int = COMPARED_FIGURES) -> int:
    """The fewest paired rounds whose signed-rank bound can reach CONFIDENCE over FIGURES
    figures at once: with n rounds the most extreme outcome has probability 2**-n, so a
    one-sided error of (1 - confidence) / figures needs 2**-n at most that."""
    alpha = (1.0 - confidence) / figures
    return math.ceil(math.log2(1.0 / alpha) - 1e-9)


GateName = Literal["regression", "long_tail", "envelope", "soak"]
# the order they run in: the cheap comparison first, the long soak last
GATE_ORDER: tuple[GateName, ...] = ("regression", "long_tail", "envelope", "soak")


class ProfileSpec(Section):
    """The bench profile of the regression gate and the envelope sweep, stored with each
    release's evidence: random token prompts of `input_len`, `output_len` tokens out
    (EOS ignored, so every answer has that length), `concurrency` in flight, and
    `prompts_per_round` requests per round. Cut to serving.max_model_len when it is
    shorter (ascendctl/gates/profile.py)."""

    input_len: int = Field(default=512, ge=1, le=1 << 20)
    output_len: int = Field(default=256, ge=1, le=1 << 20)
    concurrency: int = Field(default=8, ge=1, le=4096)
    prompts_per_round: int = Field(default=32, ge=1, le=100_000)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    # one round (or one long-tail run) that has not finished by then has hung
    timeout_s: float = Field(default=600, ge=5, le=7200)


class SamplingSpec(Section):
    """The sampling production clients use, sent with every long-tail request; a field
    left out is the server's default (the model's generation_config, else vLLM's)."""

    temperature: Optional[float] = Field(default=None, ge=0, le=2)
    top_p: Optional[float] = Field(default=None, gt=0, le=1)
    top_k: Optional[int] = Field(default=None, ge=-1, le=1_000_000)
    repetition_penalty: Optional[float] = Field(default=None, gt=0, le=2)

    def request_fields(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class EnvelopeSpec(Section):
    """The gateway admits at most `admit_fraction` of the measured envelope and answers
    past it at once with `reject_status` and `Retry-After` (render/admission.py)."""

    enabled: bool = False
    # at most 0.9: the envelope is where the SLOs still held, not where they stop holding
    admit_fraction: float = Field(default=0.9, ge=0.1, le=0.9)
    reject_status: Literal[429, 503] = 503
    retry_after_s: int = Field(default=2, ge=1, le=600)
    # the sweep: concurrency levels, each run with `requests_per_slot` × level requests
    # (at least 8) and judged hung when it has not finished in `level_timeout_s`
    levels: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64],
                              min_length=1, max_length=32)
    requests_per_slot: int = Field(default=4, ge=1, le=1000)
    level_timeout_s: float = Field(default=300, ge=5, le=7200)

    @field_validator("levels")
    @classmethod
    def _rising(cls, levels: list[int]) -> list[int]:
        if any(level < 1 or level > 65536 for level in levels):
            raise ValueError(f"levels must be between 1 and 65536: {levels}")
        if sorted(set(levels)) != levels:
            raise ValueError(f"levels must rise strictly: {levels}")
        return levels


class PromotionSpec(Section):
    throughput_ratio: float = Field(default=0.97, ge=0.5, le=1.0)
    p99_ratio: float = Field(default=1.05, ge=1.0, le=2.0)
    rounds: int = Field(default=12, ge=4, le=50)
    confidence: float = Field(default=0.99, ge=0.8, le=0.999)
    long_tail_requests: int = Field(default=1000, ge=1000, le=100_000)
    long_tail_max_increase: float = Field(default=0.005, ge=0.0, le=0.1)
    soak_s: float = Field(default=7200, ge=60, le=7 * 86400)
    soak_sample_s: float = Field(default=10, ge=1, le=300)
    max_hbm_growth_mib_per_h: float = Field(default=64, gt=0, le=65536)
    max_rss_growth_mib_per_h: float = Field(default=512, gt=0, le=1 << 20)
    stall_s: float = Field(default=60, ge=5, le=3600)
    envelope: EnvelopeSpec = EnvelopeSpec()
    gates: list[GateName] = Field(default_factory=lambda: list(GATE_ORDER), max_length=4)
    # False: the gates run on the rollout's first batch (the canary) only; the later
    # groups go in on its evidence (their quality gate still runs). True: on every group.
    every_group: bool = False
    # False: every gate runs even after one failed, and the failures are reported together
    # (all the evidence, from a longer canary)
    fail_fast: bool = True
    sampling: SamplingSpec = SamplingSpec()
    # the long tail's prompts (a prompt file as slo.quality reads them; expected answers
    # optional, checked where given); default: the quality gate's prompt set
    prompts: Optional[str] = None

    _prompt_set: Optional[PromptSet] = PrivateAttr(default=None)

    @field_validator("prompts")
    @classmethod
    def _prompt_path(cls, value: Optional[str]) -> Optional[str]:
        path = prompt_file_path(value)
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"prompt set {path} does not exist on this machine")
        return path

    def prompt_set(self) -> Optional[PromptSet]:
        """The long tail's own prompts (read and checked once), or None: the quality
        gate's."""
        if self.prompts is not None and self._prompt_set is None:
            # InputError (not ValueError): the message names the prompt file and its line
            self._prompt_set = load_prompt_file(self.prompts, require_expectations=False)
        return self._prompt_set
    profile: ProfileSpec = ProfileSpec()

    @field_validator("gates")
    @classmethod
    def _each_once(cls, gates: list[str]) -> list[str]:
        if len(set(gates)) != len(gates):
            raise ValueError(f"each gate at most once: {gates}")
        return gates

    @model_validator(mode="after")
    def _enough_rounds(self) -> "PromotionSpec":
        self.prompt_set()
        needed = rounds_needed(self.confidence)
        if self.rounds < needed:
            raise ValueError(f"rounds {self.rounds} cannot give confidence {self.confidence:g} "
                             f"over {COMPARED_FIGURES} figures: it needs at least {needed} "
                             "rounds (or a lower confidence)")
        if self.stall_s >= self.soak_s:
            raise ValueError(f"stall_s {self.stall_s:g} must be shorter than soak_s "
                             f"{self.soak_s:g}: a stall could never be seen")
        if self.soak_sample_s * 2 > self.stall_s:
            raise ValueError(f"soak_sample_s {self.soak_sample_s:g} must be at most half of "
                             f"stall_s {self.stall_s:g}: a stall must span samples")
        return self

    def runs(self, gate: str) -> bool:
        return gate in self.gates

    @property
    def ordered_gates(self) -> tuple[GateName, ...]:
        return tuple(g for g in GATE_ORDER if g in self.gates)


DEFAULT_PROMOTION = PromotionSpec()
