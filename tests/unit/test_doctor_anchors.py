"""The literal prefilter: every match of a regex contains one of its required literals."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ascendctl.doctor.anchors import required_literals


def literals(pattern: str):
    return required_literals(re.compile(pattern))


def test_a_literal_run_is_required():
    assert literals(r"x{0,3}abcd") == ("abcd",)
    assert literals(r"\bEI0006\b") == ("EI0006",)
    # zero-width items and groups that occur once do not break the run
    assert literals(r"ab(?=cd)cd") == ("abcd",)
    assert literals(r"abc(?P<g>def)ghi") == ("abcdefghi",)


def test_an_alternation_requires_one_literal_of_each_branch():
    assert literals(r"foo error|bar failure") == ("bar failure", "foo error")
    # the requirement whose shortest literal is longest is kept
    assert literals(r"(?:alpha|beta)\d+ gamma") == (" gamma",)
    assert literals(r"(?:alpha|beta)\d+ ga") == ("alpha", "beta")


def test_optional_parts_are_not_required():
    assert literals(r"(?:abcdef)?xyz") == ("xyz",)
    assert literals(r"(?:abcdef)*") is None
    assert literals(r"(?:abcdef)+") == ("abcdef",)
    assert literals(r"abc|\d+") is None          # a branch without a literal


def test_no_literal_of_useful_length_or_case_insensitive_gives_none():
    assert literals(r"a|b") is None
    assert literals(r"\d+") is None
    assert literals(r"(?i)error code") is None
    assert literals(r"x(?i:error code)") is None


PATTERNS = [r"abc(?:cde|efg)+ghi",
            r"(?:OPS|HCCL) function error: (?P<api>\w{1,8}).{0,9}?, code (\d+)",
            r"x{0,2}(?:hello|world)[a-z]{1,3}(?:!|\?)", r"(?:abc)?def(?=g)g|zzz\d"]
FRAGMENTS = ["abc", "cde", "efg", "ghi", "OPS", "HCCL", " function error: ", "x", ", code ",
             "7", "hello", "world", "ab", "!", "?", "def", "g", "zzz", " ", "_", "q"]


@settings(max_examples=400, deadline=None)
@given(index=st.integers(0, len(PATTERNS) - 1),
       pieces=st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_every_match_contains_a_required_literal(index, pieces):
    pattern = re.compile(PATTERNS[index])
    text = "".join(pieces)
    required = required_literals(pattern)
    assert required is not None
    for match in pattern.finditer(text):
        assert any(lit in match.group(0) for lit in required), (PATTERNS[index], text)
