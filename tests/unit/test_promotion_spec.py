"""`slo.promotion` in a real inventory: absent, every default, every field read back. The
refusals are in the bad-inventory corpus (tests/fixtures/inventories/bad/promotion_*)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ascendctl.inventory.promotion import DEFAULT_PROMOTION, PromotionSpec, rounds_needed
from ascendctl.load import load_inventory
from tests.unit.test_plan_inventories import EXAMPLE
from tests.unit.test_playbook_rolling import group_inventory


def test_without_the_section_there_is_no_promotion():
    assert load_inventory(EXAMPLE, check_files=False).slo.promotion is None


def test_an_empty_section_takes_every_default(tmp_path):
    inv = group_inventory(tmp_path, groups=1, per_group=1, extra_vars="slo: {promotion: {}}")
    assert inv.slo.promotion == DEFAULT_PROMOTION
    d = DEFAULT_PROMOTION
    assert (d.throughput_ratio, d.p99_ratio, d.long_tail_requests, d.long_tail_max_increase,
            d.envelope.enabled, d.envelope.admit_fraction) == (0.97, 1.05, 1000, 0.005,
                                                              False, 0.9)
    assert d.rounds >= rounds_needed(d.confidence)


def test_every_field_is_read(tmp_path):
    section = ("slo: {promotion: {throughput_ratio: 0.95, p99_ratio: 1.1, rounds: 20, "
               "confidence: 0.999, long_tail_requests: 5000, long_tail_max_increase: 0.01, "
               "soak_s: 7200, max_hbm_growth_mib_per_h: 32, max_rss_growth_mib_per_h: 256, "
               "stall_s: 120, envelope: {enabled: true, admit_fraction: 0.8, "
               "reject_status: 429, retry_after_s: 7}}}")
    spec = group_inventory(tmp_path, groups=1, per_group=1, extra_vars=section).slo.promotion
    assert spec is not None
    assert (spec.throughput_ratio, spec.p99_ratio, spec.rounds, spec.confidence) == \
        (0.95, 1.1, 20, 0.999)
    assert (spec.long_tail_requests, spec.long_tail_max_increase, spec.soak_s) == \
        (5000, 0.01, 7200)
    assert (spec.max_hbm_growth_mib_per_h, spec.max_rss_growth_mib_per_h, spec.stall_s) == \
        (32, 256, 120)
    e = spec.envelope
    assert (e.enabled, e.admit_fraction, e.reject_status, e.retry_after_s) == \
        (True, 0.8, 429, 7)


def test_the_minimum_rounds_follow_the_confidence():
    assert [rounds_needed(c) for c in (0.8, 0.9, 0.95, 0.99, 0.999)] == [4, 5, 6, 9, 12]
    PromotionSpec(confidence=0.95, rounds=6)
    with pytest.raises(ValidationError, match="needs at least 12 rounds"):
        PromotionSpec(confidence=0.999, rounds=11)
