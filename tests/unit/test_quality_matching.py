"""Expected answers given as regular expressions: searched in a child process with a
deadline, on bounded text, so a catastrophic pattern fails its prompt instead of holding a
rolling deploy; checked when the prompt set loads, so no pattern raises at the gate."""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from ascendctl.quality.gate import NodeAnswer, evaluate, problems_of
from ascendctl.inventory.prompt_regex import (
    MATCH_DEADLINE_S, MAX_PATTERN_NESTING, MAX_SEARCHED_CHARS, MatchUndecided, RegexSearcher,
    group_nesting, pattern_problem,
)
from ascendctl.inventory.prompts import Expectation, PromptSet, QualityPrompt
from ascendctl.inventory.prompt_regex_child import serve

CATASTROPHIC = r"^(\d+)+$"
# the deadline, the child's start and a loaded machine's scheduling
MARGIN_S = 1.5


def answer(prompt_id: str, text: str) -> NodeAnswer:
    return NodeAnswer(prompt_id, text, [1, 2], "stop", None, 0.1)


def test_a_catastrophic_regex_fails_its_prompt_within_the_deadline_and_the_gate_goes_on():
    prompts = PromptSet("/srv/q.jsonl", (
        QualityPrompt("digits", prompt="40 digits:", expect=Expectation("regex", CATASTROPHIC)),
        QualityPrompt("after", prompt="Say hi", expect=Expectation("regex", r"(?i)\bhi\b")),
        QualityPrompt("third", prompt="Say no", expect=Expectation("regex", r"\byes\b")),
    ))
    answers = [answer("digits", "1" * 40 + "x"), answer("after", "Hi there"),
               answer("third", "no")]
    started = time.monotonic()
    digits, after, third = evaluate(prompts, answers, None)
    elapsed = time.monotonic() - started
    assert elapsed < MATCH_DEADLINE_S + MARGIN_S, f"{elapsed:.2f} s"
    assert digits.status == "fail" and digits.expect_ok is False
    assert digits.problem == "regex did not finish within 1 s: catastrophic backtracking?"
    # the patterns after it are searched by a fresh child and judged normally
    assert (after.status, after.expect_ok) == ("pass", True)
    assert (third.status, third.expect_ok) == ("fail", False)
    assert problems_of([digits, after, third]) == [
        "2 of 3 prompts failed (digits: regex did not finish within 1 s: catastrophic "
        "backtracking?; third: expected regex \"\\\\byes\\\\b\", got 'no')"]


def test_the_same_pattern_on_a_matching_answer_passes_at_once():
    started = time.monotonic()
    assert Expectation("regex", CATASTROPHIC).matches("1" * 40)
    assert time.monotonic() - started < MARGIN_S


def test_a_timed_out_child_is_killed_and_replaced():
    with RegexSearcher(deadline_s=0.3) as searcher:
        assert searcher.search("a", "a")
        first = searcher._child
        assert first is not None
        with pytest.raises(MatchUndecided, match="within 0.3 s"):
            searcher.search(CATASTROPHIC, "1" * 40 + "x")
        assert first.poll() is not None               # gone, not left spinning
        assert searcher.search(r"b$", "ab") and not searcher.search(r"^b", "ab")
        second = searcher._child
        assert second is not None and second.pid != first.pid
    assert second.poll() is not None                  # the with block ended it


def test_one_child_serves_every_search_of_a_gate():
    with RegexSearcher() as searcher:
        results = [searcher.search(rf"^{n}\b", f"{n} apples") for n in range(50)]
        assert results == [True] * 50
        child = searcher._child
        assert child is not None and child.poll() is None
        assert [p for p in os.listdir("/proc") if p == str(child.pid)]


def test_searches_see_the_text_as_the_engine_returned_it():
    with RegexSearcher() as searcher:
        assert searcher.search(r"^line one\nline two$", "line one\nline two")
        assert searcher.search("\u00e9t\u00e9", "l'\u00e9t\u00e9")
        assert searcher.search(r"\ud800", "lone \ud800 surrogate from an engine")
        assert not searcher.search(r"^\s*4\s*$", " 45")


def test_an_overlong_answer_fails_its_regex_without_a_search():
    text = "a" * (MAX_SEARCHED_CHARS + 1)
    with RegexSearcher() as searcher:
        with pytest.raises(MatchUndecided, match=f"the answer has {MAX_SEARCHED_CHARS + 1} "
                                                 f"characters; a regex is searched in at most "
                                                 f"{MAX_SEARCHED_CHARS}"):
            searcher.search("a", text)
        assert searcher._child is None                # nothing was started for it
        assert searcher.search("a$", "a" * MAX_SEARCHED_CHARS)
    # exact and contains are plain string comparisons: no bound needed
    assert Expectation("contains", "needle").matches(text + "needle")


def test_the_child_answers_errors_instead_of_dying():
    requests = io.StringIO(json.dumps({"pattern": "(", "text": "x"}) + "\n" + "not json\n"
                           + json.dumps({"pattern": "x", "text": "x"}) + "\n")
    answers = io.StringIO()
    serve(requests, answers)
    replies = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert replies[0] == {"ready": True}
    assert replies[1]["error"].startswith("error: missing ), unterminated subpattern")
    assert replies[2]["error"].startswith("bad request")
    assert replies[3] == {"matched": True}


@pytest.mark.parametrize("pattern, problem", [
    ("a{99999999999}", "bad regular expression: the repetition number is too large"),
    ("(" * 1000 + ")" * 1000, "groups nested 1000 deep (at most 32)"),
    ("(?:" * 33 + "x" + ")" * 33, "groups nested 33 deep"),
    ("[)]" * 40 + "(" * 40 + ")" * 40, "groups nested 40 deep"),
    ("[^]()]" * 40 + "(" * 40 + ")" * 40, "groups nested 40 deep"),
    ("x" * 2001, "a regular expression of 2001 characters (at most 2000)"),
    ("[z-a]", "bad regular expression: bad character range z-a at position 1"),
    ("(?P<a>x)(?P<a>y)", "bad regular expression: redefinition of group name"),
])
def test_patterns_that_cannot_be_expected_answers(pattern, problem):
    found = pattern_problem(pattern)
    assert found is not None and found.startswith(problem), found


def test_nesting_is_counted_as_re_reads_the_pattern():
    assert group_nesting(r"\((\()") == 1                 # escaped parentheses are text
    assert group_nesting(r"[(](x)") == 1                 # so are those in a class
    assert group_nesting(r"[]()](x)") == 1               # `]` first in a class is a member
    assert group_nesting(r"(?#(((()((x))") == 2          # a comment ends at its first `)`
    assert group_nesting("(" * MAX_PATTERN_NESTING + ")" * MAX_PATTERN_NESTING) == 32
    assert pattern_problem("(" * MAX_PATTERN_NESTING + ")" * MAX_PATTERN_NESTING) is None


def test_a_pattern_that_hides_its_nesting_from_the_count_still_cannot_raise():
    """Whatever the count misses (here: a verbose-mode comment that opens a class), compiling
    is the last check, and every failure of re.compile is an answer, never an exception."""
    hidden = "(?x)#[\n" + "(" * 996 + ")" * 996 + "]"
    assert len(hidden) == 2000 and group_nesting(hidden) == 1     # (?x) alone
    assert pattern_problem(hidden) == "bad regular expression: nested too deeply"
