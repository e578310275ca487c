"""The soak: T seconds of traffic, judged from a time series of the engine's counters.

It fails on

- a **crash**: the engine restart or gang recovery counter moved, or
  vllm:generation_tokens_total went down (a new engine process counts from 0);
- **growth**: HBM or host RSS rising faster than the bound, per hour. The slope is
  Theil–Sen's (the median of the slopes between every two points): a third of the points
  can be spikes, a warm-up step or a garbage-collection sawtooth without moving it, where
  first-vs-last compares two arbitrary samples and least squares follows the outliers;
- a **stall**: requests running throughout while generation_tokens_total stays flat for
  `stall_s` or longer (a hung collective keeps requests "running" and produces nothing);
- a soak that cannot show the above: **shorter** than `soak_s`, or with a **gap** between
  two samples of `stall_s` or more (a stall could hide in it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Sequence

from ascendctl.inventory.promotion import PromotionSpec
from ascendctl.promotion.finding import Finding

CRASH, HBM_GROWTH, RSS_GROWTH, STALL, SHORT, GAP = (
    "crash", "hbm_growth", "rss_growth", "stall", "short", "gap")
MAX_POINTS = 256     # longer series: medians of this many consecutive buckets (O(n) + 256²)
HOUR_S = 3600.0


@dataclass(frozen=True)
class SoakSample:
    t_s: float
    engine_restarts: int            # engine starts counted by the supervisor since boot
    hbm_used_mib: float             # the fullest NPU's HBM in use
    rss_mib: float                  # the engine processes' resident memory on the host
    requests_running: float         # vllm:num_requests_running
    generation_tokens_total: float  # vllm:generation_tokens_total
    recoveries: int = 0             # gang recoveries by the supervisor since boot


@dataclass(frozen=True)
class SoakVerdict:
    duration_s: float
    samples: int
    hbm_slope_mib_per_h: float
    rss_slope_mib_per_h: float
    longest_flat_s: float           # the longest time running requests produced nothing
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        if self.findings:
            return "FAIL: " + "; ".join(f.detail for f in self.findings)
        return (f"PASS: {self.duration_s:.0f} s, no restart, HBM {self.hbm_slope_mib_per_h:+.1f} "
                f"MiB/h, RSS {self.rss_slope_mib_per_h:+.1f} MiB/h, longest flat "
                f"{self.longest_flat_s:.0f} s")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed, "summary": self.summary()}


def theil_sen(times: Sequence[float], values: Sequence[float]) -> float:
    """The median of the pairwise slopes (per unit of time); series longer than MAX_POINTS
    are first reduced to the medians of MAX_POINTS consecutive buckets."""
    points = _reduced(list(zip(times, values)))
    slopes = [(vj - vi) / (tj - ti) for i, (ti, vi) in enumerate(points)
              for tj, vj in points[i + 1:] if tj > ti]
    return median(slopes) if slopes else 0.0


def _reduced(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    out = []
    for k in range(MAX_POINTS):
        bucket = points[k * len(points) // MAX_POINTS:(k + 1) * len(points) // MAX_POINTS]
        out.append((median(p[0] for p in bucket), median(p[1] for p in bucket)))
    return out


def judge_soak(samples: Sequence[SoakSample], spec: PromotionSpec) -> SoakVerdict:
    if len(samples) < 2:
        raise ValueError(f"{len(samples)} sample(s): a soak needs a series")
    for a, b in zip(samples, samples[1:]):
        if not b.t_s > a.t_s:
            raise ValueError(f"samples out of order at t={b.t_s:g} s")
    findings = []
    duration = samples[-1].t_s - samples[0].t_s
    if duration < spec.soak_s:
        findings.append(Finding(SHORT, f"the soak covered {duration:.0f} s of "
                                       f"slo.promotion.soak_s {spec.soak_s:g} s"))
    gap = max((b.t_s - a.t_s, a.t_s) for a, b in zip(samples, samples[1:]))
    if gap[0] >= spec.stall_s:
        findings.append(Finding(GAP, f"no sample for {gap[0]:.0f} s after t={gap[1]:g} s "
                                     f"(a stall of stall_s {spec.stall_s:g} s could hide)"))
    findings += _crashes(samples)
    times = [s.t_s for s in samples]
    hbm = theil_sen(times, [s.hbm_used_mib for s in samples]) * HOUR_S
    rss = theil_sen(times, [s.rss_mib for s in samples]) * HOUR_S
    for kind, what, slope, bound in ((HBM_GROWTH, "HBM", hbm, spec.max_hbm_growth_mib_per_h),
                                     (RSS_GROWTH, "host RSS", rss,
                                      spec.max_rss_growth_mib_per_h)):
        if slope > bound:
            findings.append(Finding(kind, f"{what} grew {slope:+.1f} MiB/h (Theil–Sen), "
                                          f"more than the bound {bound:g} MiB/h"))
    flat, since = _longest_flat(samples)
    if flat >= spec.stall_s:
        findings.append(Finding(STALL, f"requests ran for {flat:.0f} s from t={since:g} s "
                                       "while generation_tokens_total stayed flat "
                                       f"(stall_s {spec.stall_s:g} s)"))
    return SoakVerdict(duration_s=duration, samples=len(samples), hbm_slope_mib_per_h=hbm,
                       rss_slope_mib_per_h=rss, longest_flat_s=flat, findings=tuple(findings))


def _crashes(samples: Sequence[SoakSample]) -> list[Finding]:
    out = []
    for name, read in (("engine restart", lambda s: s.engine_restarts),
                       ("gang recovery", lambda s: s.recoveries)):
        moved = [b.t_s for a, b in zip(samples, samples[1:]) if read(b) != read(a)]
        if moved:
            out.append(Finding(CRASH, f"the {name} counter moved {len(moved)} time(s), "
                                      f"first at t={moved[0]:g} s"))
    reset = [b.t_s for a, b in zip(samples, samples[1:])
             if b.generation_tokens_total < a.generation_tokens_total]
    if reset:
        out.append(Finding(CRASH, "generation_tokens_total went down (a new engine "
                                  f"process) {len(reset)} time(s), first at "
                                  f"t={reset[0]:g} s"))
    return out


def _longest_flat(samples: Sequence[SoakSample]) -> tuple[float, float]:
    """The longest stretch with requests running at every sample and no token generated,
    and where it began."""
    longest, longest_since = 0.0, samples[0].t_s
    since = None
    for a, b in zip(samples, samples[1:]):
        if a.requests_running > 0 and b.requests_running > 0 and \
                b.generation_tokens_total == a.generation_tokens_total:
            since = a.t_s if since is None else since
            if b.t_s - since > longest:
                longest, longest_since = b.t_s - since, since
        else:
            since = None
    return longest, longest_since
