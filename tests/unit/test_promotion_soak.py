"""The soak judge (ascendctl/promotion/soak.py) on synthetic series: noisy but flat ones
pass, leaks, restarts and stalls fail, each for its reason."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ascendctl.inventory.promotion import PromotionSpec
from ascendctl.promotion.soak import (
    CRASH, GAP, HBM_GROWTH, RSS_GROWTH, SHORT, STALL, SoakSample, judge_soak, theil_sen,
)

SPEC = PromotionSpec(soak_s=3600)   # HBM 64 MiB/h, RSS 512 MiB/h, stall 60 s (defaults)
STEP_S = 5.0


def series(seed: int = 1, *, duration: float = 3700.0, hbm_per_h: float = 0.0,
           rss_per_h: float = 0.0, hbm_noise: float = 150.0, rss_noise: float = 400.0,
           sawtooth_mib: float = 0.0) -> list[SoakSample]:
    """A soak under steady load: HBM at 52 GiB (vLLM pre-allocates the KV cache) with
    allocator noise, RSS at 18 GiB with noise and optionally a garbage-collection
    sawtooth, 8 to 16 requests running and about 600 tokens/s generated."""
    rng = random.Random(seed)
    out, tokens, t = [], 0.0, 0.0
    while t <= duration:
        saw = sawtooth_mib * ((t % 300.0) / 300.0)
        out.append(SoakSample(
            t_s=t, engine_restarts=1,
            hbm_used_mib=53_248 + hbm_per_h * t / 3600 + rng.uniform(-hbm_noise, hbm_noise),
            rss_mib=18_432 + rss_per_h * t / 3600 + saw + rng.gauss(0, rss_noise / 2),
            requests_running=float(rng.randint(8, 16)), generation_tokens_total=tokens))
        tokens += rng.uniform(500, 700) * STEP_S
        t += STEP_S
    return out


@pytest.mark.parametrize("seed", range(5))
def test_noisy_but_flat_series_pass(seed):
    verdict = judge_soak(series(seed, sawtooth_mib=800.0), SPEC)
    assert verdict.passed, verdict.summary()
    assert abs(verdict.hbm_slope_mib_per_h) < SPEC.max_hbm_growth_mib_per_h / 2
    assert verdict.summary().startswith("PASS: 3700 s, no restart")


def test_a_slow_hbm_leak_fails_and_its_rate_is_measured():
    verdict = judge_soak(series(hbm_per_h=120.0), SPEC)
    assert [f.kind for f in verdict.findings] == [HBM_GROWTH]
    assert verdict.hbm_slope_mib_per_h == pytest.approx(120.0, rel=0.25)


def test_an_rss_leak_fails():
    verdict = judge_soak(series(rss_per_h=1500.0), SPEC)
    assert [f.kind for f in verdict.findings] == [RSS_GROWTH]


def test_spikes_at_the_ends_do_not_make_growth():
    """First-vs-last would call this 4 GiB of growth; the robust slope does not."""
    samples = series(seed=7)
    samples[-1] = replace(samples[-1], hbm_used_mib=samples[-1].hbm_used_mib + 4096)
    samples[0] = replace(samples[0], hbm_used_mib=samples[0].hbm_used_mib - 2048)
    for i in range(100, 700, 60):                 # and some scattered spikes
        samples[i] = replace(samples[i], hbm_used_mib=samples[i].hbm_used_mib + 8192)
    assert samples[-1].hbm_used_mib - samples[0].hbm_used_mib > 6000
    verdict = judge_soak(samples, SPEC)
    assert verdict.passed, verdict.summary()


def test_theil_sen_finds_a_slope_through_a_third_of_outliers():
    rng = random.Random(3)
    times = [float(t) for t in range(600)]
    values = [2.0 * t + (rng.uniform(500, 5000) if t % 3 == 0 else rng.gauss(0, 5))
              for t in times]
    assert theil_sen(times, values) == pytest.approx(2.0, rel=0.1)
    assert theil_sen([0.0, 1.0], [5.0, 5.0]) == 0.0


@pytest.mark.parametrize("field, value", [("engine_restarts", 2), ("recoveries", 1)])
def test_a_restart_or_recovery_is_a_crash(field, value):
    samples = series()
    at = len(samples) // 2
    samples[at:] = [replace(s, **{field: value}) for s in samples[at:]]
    verdict = judge_soak(samples, SPEC)
    assert [f.kind for f in verdict.findings] == [CRASH]
    assert f"first at t={samples[at].t_s:g} s" in verdict.findings[0].detail


def test_a_token_counter_that_goes_down_is_a_new_engine():
    samples = series()
    at = 300
    offset = samples[at].generation_tokens_total
    samples[at:] = [replace(s, generation_tokens_total=s.generation_tokens_total - offset)
                    for s in samples[at:]]
    assert [f.kind for f in judge_soak(samples, SPEC).findings] == [CRASH]


def flat_from(samples: list[SoakSample], start: int, count: int,
              running: float) -> list[SoakSample]:
    """COUNT samples from START produce nothing, with RUNNING requests; after them the
    counter goes on from where it stopped."""
    frozen = samples[start].generation_tokens_total
    lost = samples[start + count].generation_tokens_total - frozen
    out = list(samples)
    for i in range(start, len(out)):
        s = out[i]
        if i <= start + count:
            out[i] = replace(s, generation_tokens_total=frozen, requests_running=running)
        else:
            out[i] = replace(s, generation_tokens_total=s.generation_tokens_total - lost)
    return out


def test_running_requests_without_tokens_for_stall_s_is_a_stall():
    samples = flat_from(series(), 200, 18, running=12.0)       # 90 s flat
    verdict = judge_soak(samples, SPEC)
    assert [f.kind for f in verdict.findings] == [STALL]
    assert verdict.longest_flat_s == 90.0
    assert "from t=1000 s" in verdict.findings[0].detail


def test_idle_or_short_pauses_are_not_stalls():
    idle = flat_from(series(), 200, 60, running=0.0)            # 300 s with nothing to do
    assert judge_soak(idle, SPEC).passed
    short = flat_from(series(), 200, 6, running=12.0)           # 30 s without a token
    verdict = judge_soak(short, SPEC)
    assert verdict.passed and verdict.longest_flat_s == 30.0


def test_a_soak_too_short_or_with_a_hole_proves_nothing():
    assert [f.kind for f in judge_soak(series(duration=1800.0), SPEC).findings] == [SHORT]
    samples = series()
    holed = samples[:100] + samples[120:]                       # 105 s without a sample
    verdict = judge_soak(holed, SPEC)
    assert [f.kind for f in verdict.findings] == [GAP]
    assert "no sample for 105 s after t=495 s" in verdict.findings[0].detail


def test_a_series_out_of_order_is_an_error():
    samples = series(duration=100.0)
    with pytest.raises(ValueError, match="out of order"):
        judge_soak([samples[1], samples[0]] + samples[2:], SPEC)
    with pytest.raises(ValueError, match="a soak needs a series"):
        judge_soak(samples[:1], SPEC)
