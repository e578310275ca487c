"""`slo.promotion`: the evidence a new release must give before it is promoted
(docs/promotion.md). Only the thresholds live here; the judgments are in
ascendctl/promotion/.

    promotion:
      throughput_ratio: 0.97     # new / previous output throughput, at least
      p99_ratio: 1.05            # new / previous p99 TTFT and p99 TPOT, at most
      rounds: 12                 # interleaved bench rounds per release
      confidence: 0.99           # of the whole comparison (every figure together)
      long_tail_requests: 1000
      long_tail_max_increase: 0.005
      soak_s: 3600
      envelope: {enabled: true}
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ascendctl.inventory.model import Section

# throughput, p99 TTFT and p99 TPOT are compared at once: each gets a third of the error
COMPARED_FIGURES = 3


def rounds_needed(confidence: float, figures: int = COMPARED_FIGURES) -> int:
    """The fewest paired rounds whose signed-rank bound can reach CONFIDENCE over FIGURES
    figures at once: with n rounds the most extreme outcome has probability 2**-n, so a
    one-sided error of (1 - confidence) / figures needs 2**-n at most that."""
    alpha = (1.0 - confidence) / figures
    return math.ceil(math.log2(1.0 / alpha) - 1e-9)


class EnvelopeSpec(Section):
    """The gateway admits at most `admit_fraction` of the measured envelope and answers
    past it at once with `reject_status` and `Retry-After` (render/admission.py)."""

    enabled: bool = False
    # at most 0.9: the envelope is where the SLOs still held, not where they stop holding
    admit_fraction: float = Field(default=0.9, ge=0.1, le=0.9)
    reject_status: Literal[429, 503] = 503
    retry_after_s: int = Field(default=2, ge=1, le=600)


class PromotionSpec(Section):
    throughput_ratio: float = Field(default=0.97, ge=0.5, le=1.0)
    p99_ratio: float = Field(default=1.05, ge=1.0, le=2.0)
    rounds: int = Field(default=12, ge=4, le=50)
    confidence: float = Field(default=0.99, ge=0.8, le=0.999)
    long_tail_requests: int = Field(default=1000, ge=1000, le=100_000)
    long_tail_max_increase: float = Field(default=0.005, ge=0.0, le=0.1)
    soak_s: float = Field(default=3600, ge=60, le=7 * 86400)
    max_hbm_growth_mib_per_h: float = Field(default=64, gt=0, le=65536)
    max_rss_growth_mib_per_h: float = Field(default=512, gt=0, le=1 << 20)
    stall_s: float = Field(default=60, ge=5, le=3600)
    envelope: EnvelopeSpec = EnvelopeSpec()

    @model_validator(mode="after")
    def _enough_rounds(self) -> "PromotionSpec":
        needed = rounds_needed(self.confidence)
        if self.rounds < needed:
            raise ValueError(f"rounds {self.rounds} cannot give confidence {self.confidence:g} "
                             f"over {COMPARED_FIGURES} figures: it needs at least {needed} "
                             "rounds (or a lower confidence)")
        if self.stall_s >= self.soak_s:
            raise ValueError(f"stall_s {self.stall_s:g} must be shorter than soak_s "
                             f"{self.soak_s:g}: a stall could never be seen")
        return self


DEFAULT_PROMOTION = PromotionSpec()
