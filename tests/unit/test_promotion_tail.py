"""The long-tail comparison (ascendctl/promotion/tail.py): the failure rate of 1000 answers
against the previous release's + 0.5 %, over 1000 seeded trials per case."""

from __future__ import annotations

import math
import random

import pytest

from ascendctl.inventory.promotion import PromotionSpec
from ascendctl.promotion.tail import TailCounts, answer_failed, compare_tails, wilson

SPEC = PromotionSpec()
TRIALS = 1000
ALPHA = 1 - SPEC.confidence
# the Monte Carlo error of a rate near ALPHA over TRIALS trials, three standard deviations
SLACK = 3 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)


def fail_rate(previous_rate: float, candidate_rate: float, seed: int) -> float:
    rng = random.Random(seed)

    def tail(rate: float) -> TailCounts:
        n = SPEC.long_tail_requests
        return TailCounts(n, sum(rng.random() < rate for _ in range(n)))

    fails = sum(not compare_tails(tail(previous_rate), tail(candidate_rate), SPEC).passed
                for _ in range(TRIALS))
    return fails / TRIALS


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.05])
def test_an_unchanged_failure_rate_passes(rate):
    false_fail = fail_rate(rate, rate, seed=1)
    assert false_fail <= ALPHA + SLACK, f"rate {rate}: false fail rate {false_fail:.3f}"


@pytest.mark.parametrize("previous, candidate, at_least", [
    (0.0, 0.01, 0.80),     # 0 -> 1 %: measured 0.875
    (0.0, 0.02, 0.99),     # measured 1.000
    (0.01, 0.04, 0.95),    # 1 % -> 4 %: measured 0.987
])
def test_a_worse_failure_rate_fails(previous, candidate, at_least):
    rate = fail_rate(previous, candidate, seed=2)
    assert rate >= at_least, f"{previous} -> {candidate}: false pass rate {1 - rate:.3f}"


@pytest.mark.parametrize("previous, candidate, passes", [
    (0, 0, True), (0, 4, True), (0, 10, False), (5, 12, True), (3, 30, False),
    (30, 3, True),        # better is never a failure
])
def test_verdicts_at_1000_requests(previous, candidate, passes):
    result = compare_tails(TailCounts(1000, previous), TailCounts(1000, candidate), SPEC)
    assert result.passed is passes, result.summary()
    assert result.lower <= result.increase <= result.upper


def test_an_increase_within_the_allowance_passes_however_sure():
    """0.3 points more over 100 000 requests is certainly worse, and allowed."""
    spec = PromotionSpec(long_tail_requests=100_000)
    result = compare_tails(TailCounts(100_000, 1000), TailCounts(100_000, 1300), spec)
    assert result.lower > 0 and result.passed
    result = compare_tails(TailCounts(100_000, 1000), TailCounts(100_000, 1700), spec)
    assert not result.passed and result.summary().startswith("FAIL: 1700/100000")


def test_wilson_bounds_are_the_textbook_values():
    # Newcombe 1998, table II, example (a): 81/263 at 95 %: 0.2553 to 0.3662
    low, high = wilson(81, 263, 1.959964)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    low, high = wilson(0, 10, 1.959964)                 # example (g): 0 to 0.2775
    assert low == 0.0 and round(high, 4) == 0.2775


def test_too_short_a_tail_and_impossible_counts_are_errors():
    with pytest.raises(ValueError, match="fewer than slo.promotion.long_tail_requests 1000"):
        compare_tails(TailCounts(999, 0), TailCounts(1000, 0), SPEC)
    with pytest.raises(ValueError, match="11 failed of 10 requests"):
        TailCounts(10, 11)


def test_an_answer_fails_on_any_of_its_three_checks():
    assert not answer_failed(None, False, None)
    assert not answer_failed(None, False, True)
    assert answer_failed("HTTP 500", False, None)
    assert answer_failed(None, True, True)
    assert answer_failed(None, False, False)
