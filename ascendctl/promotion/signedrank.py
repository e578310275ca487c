"""Wilcoxon's signed-rank confidence bounds and the Hodges–Lehmann estimate of a centre.

For paired differences d_1..d_n symmetric about an unknown centre θ, the number of Walsh
averages (d_i + d_j) / 2, i <= j, above θ has the signed-rank null distribution exactly,
whatever the shape of the noise. So the c-th smallest Walsh average is a lower bound for θ
with error P(W <= c - 1), and the c-th largest an upper bound with the same error
(Hollander & Wolfe, Nonparametric Statistical Methods, §3.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import median
from typing import Sequence

MAX_PAIRS = 200     # exact counts up to here: n(n+1)/2 = 20 100 rank sums


@lru_cache(maxsize=64)
def null_cdf(n: int) -> tuple[float, ...]:
    """P(W <= w) for w = 0 .. n(n+1)/2 under the null: each rank's sign a fair coin."""
    if not 1 <= n <= MAX_PAIRS:
        raise ValueError(f"{n} pairs: the exact signed-rank distribution is computed for "
                         f"1 to {MAX_PAIRS}")
    top = n * (n + 1) // 2
    counts = [1] + [0] * top
    for rank in range(1, n + 1):
        for total in range(top, rank - 1, -1):
            counts[total] += counts[total - rank]
    cdf, running, outcomes = [], 0, 2 ** n
    for count in counts:
        running += count
        cdf.append(running / outcomes)
    return tuple(cdf)


def bound_rank(n: int, alpha: float) -> int:
    """The largest c with P(W <= c - 1) <= alpha (0 when no bound has that error)."""
    cdf = null_cdf(n)
    c = 0
    while c < len(cdf) and cdf[c] <= alpha:
        c += 1
    return c


@dataclass(frozen=True)
class Centre:
    estimate: float     # Hodges–Lehmann: the median of the Walsh averages
    lower: float        # one-sided bound, error at most alpha below
    upper: float        # one-sided bound, error at most alpha above
    alpha: float        # the error bound of each side, as requested
    achieved: float     # the exact error of each side, P(W <= c - 1) <= alpha


def centre(values: Sequence[float], alpha: float) -> Centre:
    """The centre of VALUES with one-sided bounds each wrong with probability <= ALPHA.
    Raises ValueError when there are too few values to reach ALPHA (2**-n > alpha)."""
    n = len(values)
    c = bound_rank(n, alpha)
    if c == 0:
        raise ValueError(f"{n} pairs cannot bound the centre with error {alpha:.4g} "
                         f"(the least possible is 2**-{n} = {2.0 ** -n:.4g})")
    walsh = sorted((values[i] + values[j]) / 2 for i in range(n) for j in range(i, n))
    return Centre(estimate=median(walsh), lower=walsh[c - 1], upper=walsh[-c], alpha=alpha,
                  achieved=null_cdf(n)[c - 1])
