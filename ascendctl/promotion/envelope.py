"""The load envelope: the highest concurrency one serving group sustains with the
inventory's latency SLOs met, no request failed and nothing hung, found from a sweep of
bench runs at rising concurrency. It is stored with the release and bounds what the
gateway admits (render/admission.py).

Only the latency SLOs (p99 TTFT, p99 TPOT) and the requests bound it: output tokens/s per
NPU rises with concurrency, so a minimum of it fails at the low levels and says nothing
about the high ones. The envelope is monotone: the highest level such that it and every
level below it held. A level that holds above one that failed is reported (noise, or a
sweep too coarse), never trusted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

from ascendctl.benchmark.figures import BenchFigures
from ascendctl.benchmark.slo import FAIL, evaluate
from ascendctl.inventory.model import SloSpec

LATENCY_SLOS = ("slo.max_p99_ttft_ms", "slo.max_p99_tpot_ms")


@dataclass(frozen=True)
class SweepPoint:
    concurrency: int
    figures: Optional[BenchFigures]     # None: the run left no result
    hung: bool = False                  # the run did not finish within its time limit
    errors: int = 0                     # failures the caller saw besides vLLM's `failed`


@dataclass(frozen=True)
class LevelVerdict:
    concurrency: int
    held: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Envelope:
    concurrency: Optional[int]      # None: not even the lowest level held
    bounded: bool                   # a level above it failed (False: the sweep never did)
    levels: tuple[LevelVerdict, ...]

    @property
    def anomalies(self) -> tuple[int, ...]:
        """Levels that held above the first one that failed."""
        failed = [v.concurrency for v in self.levels if not v.held]
        return tuple(v.concurrency for v in self.levels
                     if v.held and failed and v.concurrency > failed[0])

    def summary(self) -> str:
        if self.concurrency is None:
            first = self.levels[0]
            return (f"no envelope: concurrency {first.concurrency} already failed: "
                    + "; ".join(first.reasons))
        above = next((v for v in self.levels if not v.held), None)
        tail = (f"; concurrency {above.concurrency} failed: " + "; ".join(above.reasons)
                if above is not None else "; no level tested failed (a lower bound)")
        return f"envelope {self.concurrency}{tail}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "anomalies": list(self.anomalies), "summary": self.summary()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Envelope:
        """As stored with a release (as_dict)."""
        levels = tuple(LevelVerdict(int(v["concurrency"]), bool(v["held"]),
                                    tuple(str(r) for r in v["reasons"]))
                       for v in data["levels"])
        concurrency = data["concurrency"]
        return cls(concurrency=None if concurrency is None else int(concurrency),
                   bounded=bool(data["bounded"]), levels=levels)


def judge_level(point: SweepPoint, slo: SloSpec) -> LevelVerdict:
    reasons: list[str] = []
    if point.hung:
        reasons.append("the run hung")
    if point.errors:
        reasons.append(f"{point.errors} request error(s)")
    if point.figures is None:
        reasons.append("no result")
    else:
        # npus only scales the per-NPU throughput, which the envelope does not read
        verdict = evaluate(point.figures, slo, npus=1)
        reasons += [c.message for c in verdict.checks
                    if c.id in LATENCY_SLOS and c.status == FAIL]
        reasons += verdict.problems
    return LevelVerdict(point.concurrency, not reasons, tuple(reasons))


def find_envelope(sweep: Sequence[SweepPoint], slo: SloSpec) -> Envelope:
    if not sweep:
        raise ValueError("an empty sweep has no envelope")
    levels = [p.concurrency for p in sweep]
    if len(set(levels)) != len(levels) or min(levels) < 1:
        raise ValueError(f"sweep levels must be distinct and at least 1: {levels}")
    verdicts = tuple(judge_level(p, slo) for p in sorted(sweep, key=lambda p: p.concurrency))
    envelope: Optional[int] = None
    for verdict in verdicts:
        if not verdict.held:
            return Envelope(envelope, True, verdicts)
        envelope = verdict.concurrency
    return Envelope(envelope, False, verdicts)
