"""The long tail: did more of the candidate's answers fail than the previous release's?

Each of the at least `long_tail_requests` answers (the target concurrency, production
sampling) fails when its request failed, garbage.check_answer flagged it, or it missed
the prompt set's expected answer. The candidate fails the gate when its failure rate is
above the previous release's by more than `long_tail_max_increase` **and** the data show
it is worse at all: the lower confidence bound of the difference is above 0.

The bound is Newcombe's hybrid score interval for a difference of two proportions (his
method 10, Statistics in Medicine 17:873, 1998) from Wilson score intervals, one-sided
with error 1 - confidence: at 1 000 requests and rates near 0 (the usual case: 0 to a few
failed answers) it keeps its coverage, where the textbook normal interval collapses to
a point at 0 failures and calls 1 failure against 0 a certain increase.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Optional

from ascendctl.inventory.promotion import PromotionSpec


@dataclass(frozen=True)
class TailCounts:
    requests: int
    failed: int         # request errors, garbage answers and missed expectations

    def __post_init__(self) -> None:
        if not 0 <= self.failed <= self.requests:
            raise ValueError(f"{self.failed} failed of {self.requests} requests")

    @property
    def rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0


def answer_failed(request_error: Optional[str], garbage: bool,
                  expectation_ok: Optional[bool]) -> bool:
    """One answer of the tail: failed when any of the three says so (None: no expected
    answer for this prompt)."""
    return request_error is not None or garbage or expectation_ok is False


@dataclass(frozen=True)
class TailComparison:
    previous: TailCounts
    candidate: TailCounts
    increase: float         # candidate rate - previous rate
    lower: float            # one-sided bounds on the increase, each wrong with prob. <= alpha
    upper: float
    allowed: float
    passed: bool

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict}: {self.candidate.failed}/{self.candidate.requests} answers failed "
                f"({self.candidate.rate:.2%}) against {self.previous.failed}/"
                f"{self.previous.requests} ({self.previous.rate:.2%}) for the previous "
                f"release: {self.increase:+.2%} [{self.lower:+.2%}, {self.upper:+.2%}], "
                f"allowed +{self.allowed:.2%}")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def wilson(failed: int, requests: int, z: float) -> tuple[float, float]:
    """The Wilson score bounds of a proportion at standard normal quantile Z."""
    p = failed / requests
    denominator = 1 + z * z / requests
    middle = (p + z * z / (2 * requests)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / requests + z * z / (4 * requests ** 2))
    return max(0.0, middle - half), min(1.0, middle + half)


def compare_tails(previous: TailCounts, candidate: TailCounts,
                  spec: PromotionSpec) -> TailComparison:
    for name, counts in (("previous", previous), ("candidate", candidate)):
        if counts.requests < spec.long_tail_requests:
            raise ValueError(f"the {name} release's tail has {counts.requests} requests, "
                             f"fewer than slo.promotion.long_tail_requests "
                             f"{spec.long_tail_requests}")
    z = NormalDist().inv_cdf(spec.confidence)
    l1, u1 = wilson(candidate.failed, candidate.requests, z)
    l0, u0 = wilson(previous.failed, previous.requests, z)
    p1, p0 = candidate.rate, previous.rate
    increase = p1 - p0
    lower = increase - math.hypot(p1 - l1, u0 - p0)
    upper = increase + math.hypot(u1 - p1, p0 - l0)
    worse = lower > 0.0
    past = increase > spec.long_tail_max_increase
    return TailComparison(previous=previous, candidate=candidate, increase=increase,
                          lower=lower, upper=upper, allowed=spec.long_tail_max_increase,
                          passed=not (worse and past))
