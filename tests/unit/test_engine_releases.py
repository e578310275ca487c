"""The shipped release-set matrix: its rows, lookups, nearest rows and image tags."""

from __future__ import annotations

import pytest

from ascendctl.engine.releases import (
    chip_variants, describe_row, load_matrix, match_versions, parse_official_tag,
)


def test_required_rows_are_shipped_with_their_sources():
    matrix = load_matrix()
    tags = [r.tag for r in matrix.releases]
    for tag in ("v0.17.0rc1", "v0.18.0", "v0.23.0", "v0.23.0.post1", "v0.30.0rc2"):
        assert tag in tags
    assert matrix.newest.tag == "v0.30.0rc2"
    for row in matrix.releases:
        assert row.sources, row.tag
        # a value no source states is marked, not guessed
        assert row.hdk.version is not None or row.hdk.unverified


@pytest.mark.parametrize("release,expected", [
    ("0.17.0rc1", {"vllm": "0.17.0", "cann": "8.5.1", "torch": "2.9.0", "torch_npu": "2.9.0",
                   "python": ("3.10", "3.11")}),
    ("v0.18.0", {"vllm": "0.18.0", "torch_npu": "2.9.0.post1+git4c901a4",
                 "triton_ascend": "3.2.0.dev20260322"}),
    ("0.23.0.post1", {"vllm": "0.23.0", "cann": "9.1.0", "torch": "2.10.0",
                      "torch_npu": "2.10.0.post4", "triton_ascend": "3.2.2",
                      "python": ("3.10", "3.12"), "nnal": "9.1.0"}),
    ("0.30.0rc2", {"vllm": "0.30.0", "cann": "9.2.0", "image_python": "3.12"}),
])
def test_rows_hold_the_documented_versions(release, expected):
    row = load_matrix().find(release.lstrip("v"))
    assert row is not None
    for key, value in expected.items():
        assert getattr(row, key) == value, key
    if release.startswith("0.23"):
        assert row.hdk.version == "26.0.RC1" and not row.hdk.unverified


def test_unknown_release_is_not_found():
    assert load_matrix().find("0.19.9") is None


def test_exact_set_matches_and_prefix_pins_work():
    result = match_versions({"vllm_ascend": "0.23.0", "cann": "9.1", "python": "3.12",
                             "driver": "26.0.rc1", "torch_npu": "2.10.0.post4"})
    assert result.applies and result.row is not None and result.row.tag == "v0.23.0"


def test_post_release_of_torch_npu_is_not_the_plain_version():
    result = match_versions({"vllm_ascend": "0.23.0", "torch_npu": "2.10.0"})
    assert result.row is None and result.nearest.tag == "v0.23.0"
    assert [d.component for d in result.differs] == ["torch_npu"]


def test_old_driver_is_refused_against_a_known_hdk():
    result = match_versions({"vllm_ascend": "0.23.0", "driver": "25.3.rc1"})
    assert result.row is None
    assert result.differs[0].component == "driver"
    assert "older than the set's HDK 26.0.RC1" in result.differs[0].reason


def test_python_outside_the_range():
    result = match_versions({"vllm_ascend": "0.18.0", "python": "3.12"})
    assert result.row is None and result.differs[0].expected == "3.10-3.11"


def test_nearest_prefers_fewest_differences_then_the_pinned_release():
    # vLLM 0.23.0 with CANN 8.5.1: one difference from v0.23.0/.post1 (CANN), more from others
    result = match_versions({"torch_npu": "2.10.0.post4", "vllm": "0.23.0", "cann": "8.5.1"})
    assert result.nearest.vllm == "0.23.0"
    assert [d.component for d in result.differs] == ["cann"]
    pinned = match_versions({"vllm_ascend": "0.18.0", "vllm": "0.17.0"})
    assert pinned.nearest.tag in ("v0.18.0", "v0.17.0rc1") and len(pinned.differs) == 1


def test_no_ascend_component_means_no_set_applies():
    assert not match_versions({"vllm": "0.32.0", "cann": "8.5.1"}).applies


@pytest.mark.parametrize("reference,expected", [
    ("quay.io/ascend/vllm-ascend:v0.23.0", ("0.23.0", "a2")),
    ("quay.io/ascend/vllm-ascend:v0.23.0-a3", ("0.23.0", "a3")),
    ("quay.io/ascend/vllm-ascend:v0.23.0-a3-openeuler", ("0.23.0", "a3-openeuler")),
    ("quay.io/ascend/vllm-ascend:v0.18.0-openeuler", ("0.18.0", "a2-openeuler")),
    ("quay.io/ascend/vllm-ascend:v0.30.0rc2-310p", ("0.30.0rc2", "310p")),
    ("localhost/ascendctl-lab/vllm-cpu:v1", None),
])
def test_official_tags(reference, expected):
    tag = parse_official_tag(reference)
    assert (None if tag is None else (tag.vllm_ascend, tag.variant)) == expected


def test_image_tags_per_release_and_chip():
    matrix = load_matrix()
    row = matrix.find("0.18.0")
    tags = row.image_tags(matrix.image_variants)
    assert tags["a2"] == "v0.18.0" and tags["a3"] == "v0.18.0-a3" and "a5" not in tags
    assert "a5" in matrix.find("0.23.0").image_tags(matrix.image_variants)
    assert chip_variants("Ascend910_93") == ("a3", "a3-openeuler")
    assert "v0.23.0: vLLM 0.23.0, CANN 9.1.0" in describe_row(matrix.find("0.23.0"))
