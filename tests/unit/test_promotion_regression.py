"""The paired comparison of two releases (ascendctl/promotion/regression.py) under noise
models built on real `vllm bench serve` figures (the lab's result file): how often an
unchanged release passes and a regressed one fails, over 1000 seeded trials each."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from ascendctl.benchmark.figures import parse_result
from ascendctl.inventory.promotion import PromotionSpec, rounds_needed
from ascendctl.promotion.regression import (
    PairedRound, RoundFigures, compare,
)
from ascendctl.promotion.signedrank import bound_rank, centre, null_cdf

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / \
    "vllm_bench_serve_result_lab.txt"
TRIALS = 1000
SPEC = PromotionSpec()


def real_figures() -> RoundFigures:
    text = FIXTURE.read_text()
    return RoundFigures.from_bench(parse_result(json.loads(text.split("\n", 1)[1])))


BASE = real_figures()


def measured(rng: random.Random, true: RoundFigures, noise: float, drift: float,
             hiccup: float = 0.0) -> RoundFigures:
    """One bench run: each figure off by up to ±NOISE on its own, all slowed alike by the
    round's DRIFT, and with probability HICCUP the whole run 40 % slower (a stall)."""
    slow = drift * (1.4 if rng.random() < hiccup else 1.0)

    def jitter() -> float:
        return 1.0 + rng.uniform(-noise, noise)

    return RoundFigures(true.output_throughput / slow * jitter(),
                        true.p99_ttft_ms * slow * jitter(), true.p99_tpot_ms * slow * jitter())


def trial_rounds(rng: random.Random, candidate: RoundFigures, *, rounds: int = SPEC.rounds,
                 noise: float = 0.10, drift: float = 0.0, hiccup: float = 0.0
                 ) -> list[PairedRound]:
    out = []
    for _ in range(rounds):
        shared = 1.0 + rng.uniform(-drift, drift)   # the machine in this round, both runs
        out.append(PairedRound(previous=measured(rng, BASE, noise, shared, hiccup),
                               candidate=measured(rng, candidate, noise, shared, hiccup)))
    return out


def pass_rate(candidate: RoundFigures, seed: int, **noise: float) -> float:
    rng = random.Random(seed)
    passed = sum(compare(trial_rounds(rng, candidate, **noise), SPEC).passed  # type: ignore[arg-type]
                 for _ in range(TRIALS))
    return passed / TRIALS


def test_the_base_figures_are_the_real_result_file():
    assert BASE.output_throughput == pytest.approx(249.0065, rel=1e-6)
    assert BASE.p99_ttft_ms == pytest.approx(76.6663, rel=1e-6)
    assert BASE.p99_tpot_ms == pytest.approx(17.29728, rel=1e-6)


@pytest.mark.parametrize("noise", [
    {"noise": 0.10},                              # ±10 % per run, independent
    {"noise": 0.10, "drift": 0.30},               # and the machine ±30 % from round to round
    {"noise": 0.05, "hiccup": 0.10},              # and one run in ten stalls 40 % slower
], ids=["pm10pct", "pm10pct-drift30pct", "pm5pct-hiccups"])
def test_an_unchanged_release_passes_at_least_99_in_100(noise):
    rate = pass_rate(BASE, seed=1, **noise)
    false_fail = 1.0 - rate
    assert false_fail <= 0.01, f"false fail rate {false_fail:.3f} over {TRIALS} trials"
    print(f"unchanged {noise}: false fail rate {false_fail:.3f}")


@pytest.mark.parametrize("candidate, what", [
    (replace(BASE, output_throughput=BASE.output_throughput * 0.85), "throughput -15 %"),
    # a latency 15 % up is log(1.15) = 0.14 from unchanged, closer than throughput 15 %
    # down (0.16): about 98 in 100 fail at 12 rounds; 20 % up is as far as 15 % down
    (replace(BASE, p99_ttft_ms=BASE.p99_ttft_ms * 1.20), "p99 TTFT +20 %"),
    (replace(BASE, p99_tpot_ms=BASE.p99_tpot_ms * 1.20), "p99 TPOT +20 %"),
], ids=["throughput-15pct", "ttft+20pct", "tpot+20pct"])
def test_a_clear_regression_fails_at_least_99_in_100(candidate, what):
    false_pass = pass_rate(candidate, seed=2, noise=0.10)
    assert false_pass <= 0.01, f"{what}: false pass rate {false_pass:.3f} over {TRIALS} trials"
    print(f"{what}: false pass rate {false_pass:.3f}")


def test_the_failure_names_the_regressed_figure_and_its_interval():
    rng = random.Random(3)
    slower = replace(BASE, output_throughput=BASE.output_throughput * 0.8)
    result = compare(trial_rounds(rng, slower), SPEC)
    assert not result.passed
    (failed,) = [f for f in result.figures if not f.passed]
    assert failed.figure == "output_throughput"
    assert failed.lower <= failed.ratio <= failed.upper < 1.0
    assert 0.7 < failed.ratio < 0.9
    assert result.summary().startswith("FAIL over 12 paired rounds: output_throughput: ratio 0.")
    assert result.as_dict()["figures"][0]["passed"] is False


def test_a_tolerated_change_passes_even_when_it_is_clearly_measured():
    """2 % slower with a 3 % tolerance: with little noise the bound excludes 'unchanged'
    (worse), but the estimate is within the tolerance, so it passes; 5 % slower fails."""
    rng = random.Random(4)
    for factor, passes in ((0.98, True), (0.95, False)):
        rounds = trial_rounds(rng, replace(BASE, output_throughput=BASE.output_throughput
                                           * factor), noise=0.005, rounds=20)
        throughput = compare(rounds, SPEC).figures[0]
        assert throughput.worse
        assert throughput.passed is passes, throughput.message


def test_the_verdict_is_deterministic_and_ignores_round_order():
    rounds = trial_rounds(random.Random(5), replace(BASE, p99_tpot_ms=BASE.p99_tpot_ms * 1.1))
    first = compare(rounds, SPEC)
    assert compare(list(rounds), SPEC) == first
    assert compare(list(reversed(rounds)), SPEC) == first


def test_swapping_the_releases_inverts_ratio_and_bounds():
    rounds = trial_rounds(random.Random(6), replace(BASE, output_throughput=200.0))
    swapped = [PairedRound(previous=r.candidate, candidate=r.previous) for r in rounds]
    a, b = compare(rounds, SPEC).figures[0], compare(swapped, SPEC).figures[0]
    assert a.ratio == pytest.approx(1 / b.ratio)
    assert a.lower == pytest.approx(1 / b.upper) and a.upper == pytest.approx(1 / b.lower)


def test_too_few_rounds_or_a_zero_figure_is_an_error():
    rounds = trial_rounds(random.Random(7), BASE)
    with pytest.raises(ValueError, match="8 pairs cannot bound"):
        compare(rounds[:8], SPEC)
    zero = replace(rounds[0], candidate=replace(BASE, output_throughput=0.0))
    with pytest.raises(ValueError, match="not a ratio of two positive figures"):
        compare([zero] + rounds[1:], SPEC)
    with pytest.raises(ValueError, match="no p99 TTFT"):
        figures = parse_result(json.loads(FIXTURE.read_text().split("\n", 1)[1]))
        RoundFigures.from_bench(replace(figures, latency_ms={}))


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99, 0.999])
def test_the_inventory_s_minimum_rounds_is_exactly_what_the_bound_needs(confidence):
    needed = rounds_needed(confidence)
    spec = PromotionSpec(confidence=confidence, rounds=max(needed, 4))
    rounds = trial_rounds(random.Random(8), BASE, rounds=needed)
    compare(rounds, spec)
    with pytest.raises(ValueError, match="cannot bound"):
        compare(rounds[:-1], spec)


def test_the_signed_rank_distribution_is_exact():
    for n in range(1, 9):
        sums = [sum(r for r, sign in zip(range(1, n + 1), signs) if sign)
                for signs in itertools.product((0, 1), repeat=n)]
        top = n * (n + 1) // 2
        brute = [sum(s <= w for s in sums) / 2 ** n for w in range(top + 1)]
        assert null_cdf(n) == pytest.approx(brute)
    # the printed tables: n = 10, one-sided 0.01 -> reject for W <= 5; n = 20, 0.025 -> 52
    assert bound_rank(10, 0.01) == 6 and bound_rank(20, 0.025) == 53


def test_the_bound_covers_the_centre_as_often_as_it_promises():
    """Skewed-free but heavy-tailed noise (Laplace): the lower bound exceeds the true
    centre in at most alpha of the trials."""
    rng = random.Random(9)
    alpha, misses = 0.05, 0
    for _ in range(2000):
        values = [0.3 + rng.choice((-1, 1)) * rng.expovariate(1.0) for _ in range(12)]
        bounds = centre(values, alpha)
        misses += bounds.lower > 0.3
        assert bounds.lower <= bounds.estimate <= bounds.upper
    assert misses / 2000 <= alpha + 0.01, misses
    assert math.isclose(centre([1.0, 2.0, 3.0], 0.2).estimate, 2.0)
