"""Is the candidate release slower than the previous one, beyond the tolerance, on the
same bench profile? Judged from paired rounds, robustly to this machine's noise.

The statistic, and why:

- **Paired rounds, at the same moment** (gates/regression.py): round i benches both
  releases at once, each head loading its own engine. What the moment brings (thermal
  state, another tenant, a burst of traffic, a shared machine's busy cores) hits both
  members of a pair alike and cancels in their ratio.
- **Log-ratios** d_i = log(candidate_i / previous_i): multiplicative noise becomes additive
  and symmetric, and a ratio and its inverse are judged alike.
- **Wilcoxon signed-rank bounds on the centre of the d_i, with the Hodges–Lehmann
  estimate** (signedrank.py). If the candidate performs like the previous release the
  two figures of a pair are exchangeable, so d_i is symmetric about 0 and the bound's error
  is exact for any noise distribution, heavy-tailed or not. A t interval assumes normal
  log-ratios and one hiccup round (a GC pause, a noisy neighbour) both shifts its mean and
  widens it; a bootstrap under-covers at a dozen rounds (the percentile interval of 12
  points is too narrow) and makes the verdict depend on a seed. This one needs no seed: the same
  rounds always give the same verdict.
- **Error split over the figures**: throughput, p99 TTFT and p99 TPOT are judged at once,
  each with one-sided error (1 - confidence) / 3, so an unchanged release fails the whole
  comparison with probability at most 1 - confidence (Bonferroni).
- **A figure fails when the evidence says it got worse and by more than the tolerance**:
  its bound excludes "unchanged" (ratio 1) on the bad side *and* its estimate is past
  the tolerance (throughput below `throughput_ratio`, a p99 above `p99_ratio`). The first
  condition bounds false failures by the error above; the second keeps a real but
  tolerated change (2 % slower with a 3 % tolerance) from failing once there are enough
  rounds to see it. Demanding instead that the bound itself clear the tolerance ("prove
  it is not 3 % slower") would need some 100 rounds at ±10 % noise per round.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ascendctl.benchmark.figures import BenchFigures
from ascendctl.inventory.promotion import COMPARED_FIGURES, PromotionSpec
from ascendctl.promotion.signedrank import centre

HIGHER, LOWER = "higher", "lower"


@dataclass(frozen=True)
class RoundFigures:
    """One bench run's figures that the comparison reads."""

    output_throughput: float    # output tokens / s
    p99_ttft_ms: float
    p99_tpot_ms: float

    @classmethod
    def from_bench(cls, figures: BenchFigures) -> RoundFigures:
        ttft, tpot = figures.latency("ttft", "p99"), figures.latency("tpot", "p99")
        if ttft is None or tpot is None:
            raise ValueError("the bench result has no p99 TTFT or TPOT (vllm bench serve "
                             "--percentile-metrics ttft,tpot --metric-percentiles 99)")
        return cls(figures.output_throughput, ttft, tpot)


@dataclass(frozen=True)
class PairedRound:
    previous: RoundFigures
    candidate: RoundFigures


# (attribute, which way is better, the spec's tolerance)
FIGURES = (("output_throughput", HIGHER, "throughput_ratio"),
           ("p99_ttft_ms", LOWER, "p99_ratio"),
           ("p99_tpot_ms", LOWER, "p99_ratio"))
assert len(FIGURES) == COMPARED_FIGURES


@dataclass(frozen=True)
class FigureComparison:
    figure: str
    better: str             # higher | lower
    ratio: float            # candidate / previous (Hodges–Lehmann on the log-ratios)
    lower: float            # one-sided bounds on the ratio, each wrong with prob. <= alpha
    upper: float
    alpha: float
    tolerance: float        # the ratio allowed (0.97: at most 3 % less; 1.05: 5 % more)
    worse: bool             # the bounds exclude ratio 1 on the bad side
    passed: bool

    @property
    def message(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        limit = ">=" if self.better == HIGHER else "<="
        return (f"{self.figure}: ratio {self.ratio:.3f} [{self.lower:.3f}, {self.upper:.3f}] "
                f"(tolerance {limit} {self.tolerance:g}): {verdict}")


@dataclass(frozen=True)
class Comparison:
    rounds: int
    confidence: float
    figures: tuple[FigureComparison, ...]

    @property
    def passed(self) -> bool:
        return all(f.passed for f in self.figures)

    def summary(self) -> str:
        failed = [f.message for f in self.figures if not f.passed]
        if failed:
            return f"FAIL over {self.rounds} paired rounds: " + "; ".join(failed)
        return (f"PASS over {self.rounds} paired rounds: " +
                "; ".join(f"{f.figure} {f.ratio:.3f}" for f in self.figures))

    def as_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "confidence": self.confidence, "passed": self.passed,
                "summary": self.summary(), "figures": [asdict(f) for f in self.figures]}


def compare(rounds: Sequence[PairedRound], spec: PromotionSpec) -> Comparison:
    """The verdict over paired ROUNDS (raises ValueError for too few rounds or figures that
    are not positive)."""
    alpha = (1.0 - spec.confidence) / COMPARED_FIGURES
    out = []
    for name, better, tolerance_field in FIGURES:
        logs = [_log_ratio(getattr(r.candidate, name), getattr(r.previous, name), name)
                for r in rounds]
        bounds = centre(logs, alpha)
        tolerance = getattr(spec, tolerance_field)
        if better == HIGHER:
            worse = bounds.upper < 0.0
            past = bounds.estimate < math.log(tolerance)
        else:
            worse = bounds.lower > 0.0
            past = bounds.estimate > math.log(tolerance)
        out.append(FigureComparison(
            figure=name, better=better, ratio=math.exp(bounds.estimate),
            lower=math.exp(bounds.lower), upper=math.exp(bounds.upper), alpha=alpha,
            tolerance=tolerance, worse=worse, passed=not (worse and past)))
    return Comparison(rounds=len(rounds), confidence=spec.confidence, figures=tuple(out))


def _log_ratio(candidate: float, previous: float, name: str) -> float:
    if not (candidate > 0 and previous > 0 and math.isfinite(candidate)
            and math.isfinite(previous)):
        raise ValueError(f"{name}: {candidate!r} / {previous!r} is not a ratio of two "
                         "positive figures")
    return math.log(candidate / previous)
