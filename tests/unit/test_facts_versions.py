"""Version normalisation: rc/RC, 4-5 part versions, T/B/alpha tags, PEP 440, ranges."""

import pytest

from ascendctl.facts.versions import (
    InnerCode,
    VersionError,
    parse_inner_code,
    parse_inner_code_list,
    parse_version,
    parse_version_ranges,
)

V = parse_version


@pytest.mark.parametrize("lower,higher", [
    ("24.1.rc3", "24.1.0"),             # an RC comes before the release it leads to
    ("8.0.RC3", "8.0.0"),
    ("23.0.rc2", "23.0.rc3"),
    ("24.1.rc2", "24.1.rc2.2"),         # 4-part patch of an RC
    ("24.1.0", "24.1.0.3"),
    ("24.1.0.3", "24.1.1"),
    ("25.3.rc1", "25.5.2"),
    ("7.0.T10", "7.0.0"),               # test build before the release
    ("7.0.0", "7.1.0.11.220"),          # 5-part firmware versions
    ("7.2.99", "7.3.0.1.231"),
    ("0.17.0rc1", "0.17.0"),            # PEP 440
    ("2.9.0", "2.9.0.post1"),
    ("2.1.0.post8.dev20241009", "2.1.0.post8"),
    ("8.3.RC1.alpha003", "8.3.RC1"),
    ("9.1.0-beta.1", "9.1.0"),
])
def test_ordering(lower, higher):
    assert V(lower) < V(higher)
    assert V(higher) > V(lower)
    assert V(lower) != V(higher)


@pytest.mark.parametrize("a,b", [
    ("24.1.RC3", "24.1.rc3"),           # case of rc/RC does not matter
    ("v0.17.0rc1", "0.17.0rc1"),        # leading v (vllm-ascend tags)
    ("0.32.0+cpu", "0.32.0"),           # local tag ignored for ordering
    ("24.0", "24.0.0"),                 # trailing zeros
    ("25.3.rc1.b020", "25.3.rc1"),      # build tag of the same version
    ("8.0.0.B100", "8.0.0"),
    ("7.6.T13.0.B094", "7.6.T13.0"),
])
def test_equal(a, b):
    assert V(a) == V(b)
    assert hash(V(a)) == hash(V(b))


def test_local_tag_kept_and_release_parts():
    v = V("2.9.0+cpu")
    assert v.local == "cpu" and v.release == (2, 9, 0) and str(v) == "2.9.0+cpu"
    assert V("24.1.rc3").release == (24, 1) and V("24.1.rc3") < V("24.1.0.3")


def test_series_prefix():
    assert V("24.1.rc3").startswith(V("24.1"))
    assert not V("24.10.0").startswith(V("24.1"))


@pytest.mark.parametrize("text", ["", "abc", "x1.2", "1.2.zz3", "1..2!"])
def test_rejects_non_versions(text):
    with pytest.raises(VersionError):
        V(text)


def test_driver_fw_range_from_capture():
    # driver 24.1.rc3 compatible_version_fw=[7.0.0,7.5.99] with firmware 7.5.0.1.129 (capture C)
    (r,) = parse_version_ranges("[7.0.0,7.5.99]")
    assert r.contains(V("7.5.0.1.129"))
    # the real mismatch: driver 24.1.rc2 [7.0.0,7.2.99] vs firmware 7.3.0.1.231
    (r,) = parse_version_ranges("[7.0.0, 7.2.99]")
    assert not r.contains(V("7.3.0.1.231"))


def test_several_fw_ranges():
    ranges = parse_version_ranges("[6.4.0,6.4.99],[7.0.0,8.9.9]")
    assert len(ranges) == 2
    assert any(r.contains(V("6.4.12")) for r in ranges)
    assert any(r.contains(V("7.8.0.2.212")) for r in ranges)
    assert not any(r.contains(V("6.5.0")) for r in ranges)


def test_prefix_ranges_with_trailing_dot():
    ranges = parse_version_ranges("[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]")
    assert [r.hi_is_prefix for r in ranges] == [True, True, True]
    assert str(ranges[2]) == "[24.1,24.1.]"
    assert any(r.contains(V("24.1.rc3")) for r in ranges)      # the driver shipped with it
    assert any(r.contains(V("24.0.1")) for r in ranges)
    assert not any(r.contains(V("24.2.0")) for r in ranges)
    assert not any(r.contains(V("25.3.rc1")) for r in ranges)


def test_inner_codes():
    assert parse_inner_code("V100R001C19SPC001B124") == InnerCode(100, 1, 19)
    assert str(parse_inner_code("V100R001C23SPC002B212")) == "V100R001C23"
    codes = parse_inner_code_list("[V100R001C13],[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]")
    assert [str(c.low) for c in codes] == ["V100R001C13", "V100R001C15", "V100R001C17", "V100R001C18",
                                           "V100R001C19"]
    ranged = parse_inner_code_list("[V100R001C13,V100R001C19],[V100R001C30]")   # the nnae form
    assert ranged[0].contains(InnerCode(100, 1, 15)) and not ranged[0].contains(InnerCode(100, 1, 20))
    assert ranged[1].contains(InnerCode(100, 1, 30))
    assert not parse_inner_code_list("[V100R003C10]")[0].contains(InnerCode(100, 1, 10))  # R differs
