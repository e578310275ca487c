"""Agreement of greedy answers, token by token: what a benign late flip costs and what a
changed model costs; and the gate's verdict over a prompt set."""

from __future__ import annotations

import pytest

from ascendctl.quality.agreement import common_prefix, mean_agreement, token_agreement
from ascendctl.quality.gate import NodeAnswer, ReferenceAnswers, agreement_figures, evaluate, \
    problems_of
from ascendctl.inventory.prompts import Expectation, PromptSet, QualityPrompt
from ascendctl.quality.result import Reference


def test_identical_sequences_agree_fully():
    measured = token_agreement([5, 6, 7], [5, 6, 7])
    assert measured.agreement == 1.0 and measured.diverges_at is None
    assert token_agreement([], []).agreement == 1.0


def test_only_the_common_prefix_counts():
    # after the first difference the continuation is conditioned on other tokens: the
    # later positions that happen to match again earn nothing
    measured = token_agreement([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 9, 4, 5, 6, 7, 8])
    assert measured.agreement == pytest.approx(2 / 8) and measured.diverges_at == 2
    assert common_prefix([1, 2, 3], [1, 2]) == 2


def test_a_shorter_answer_is_measured_against_the_longer_one():
    # an early end of sequence is a difference too (divided by the longer length)
    measured = token_agreement([1, 2, 3, 4], [1, 2])
    assert measured.agreement == 0.5 and measured.diverges_at == 2
    assert token_agreement([1, 2], [1, 2, 3, 4]).agreement == 0.5


def test_a_late_flip_costs_little_and_an_early_one_costs_almost_everything():
    reference = list(range(32))
    late = reference[:30] + [99, 98]
    early = [99] + reference[1:]
    assert token_agreement(reference, late).agreement == pytest.approx(30 / 32)
    assert token_agreement(reference, early).agreement == 0.0
    # one late flip among 16 prompts keeps the set well above 0.9; a change that moves
    # the first tokens of most answers sinks it
    assert mean_agreement([1.0] * 15 + [30 / 32]) > 0.99
    assert mean_agreement([0.0] * 12 + [1.0] * 4) == 0.25


def prompts(*ids: str, expect: Expectation | None = None) -> PromptSet:
    return PromptSet("test", tuple(QualityPrompt(id=i, prompt=f"prompt {i}", expect=expect)
                                   for i in ids))


def answer(prompt_id: str, tokens: list[int] | None, text: str = "x",
           error: str | None = None) -> NodeAnswer:
    return NodeAnswer(prompt_id, None if error else text, tokens, "length", error, 0.1)


def reference_of(**tokens: list[int]) -> ReferenceAnswers:
    return ReferenceAnswers(Reference("record", release="r-old", stamp="s"),
                            {k: answer(k, v, text=f"ref {k}") for k, v in tokens.items()})


def test_evaluate_compares_each_answer_with_the_reference():
    ref = reference_of(a=[1, 2, 3, 4], b=[5, 6, 7, 8])
    outcomes = evaluate(prompts("a", "b"), [answer("a", [1, 2, 3, 4]), answer("b", [5, 0, 7, 8])],
                        ref)
    assert [(o.id, o.status, o.agreement, o.diverges_at) for o in outcomes] == \
        [("a", "pass", 1.0, None), ("b", "pass", 0.25, 1)]
    assert outcomes[1].reference_text == "ref b" and outcomes[1].diverged
    figures = agreement_figures(outcomes, 0.9)
    assert figures.mean == pytest.approx(0.625) and figures.exact_rate == 0.5
    assert not figures.passed and agreement_figures(outcomes, 0.6).passed
    # a diverging answer alone is not a failed prompt: the set's mean decides
    assert problems_of(outcomes) == []


def test_a_failed_request_fails_its_prompt_and_counts_as_no_agreement():
    ref = reference_of(a=[1, 2], b=[3, 4])
    outcomes = evaluate(prompts("a", "b"),
                        [answer("a", [1, 2]),
                         answer("b", None, error="/v1/completions answered 500: boom")], ref)
    assert outcomes[1].status == "fail" and outcomes[1].problem.endswith("500: boom")
    assert agreement_figures(outcomes, 0.9).mean == 0.5
    [problem] = problems_of(outcomes)
    assert problem.startswith("1 of 2 prompts failed (b: /v1/completions answered 500")


def test_missing_token_ids_fail_agreement_but_not_an_expected_answer():
    expect = Expectation("contains", "4")
    outcomes = evaluate(prompts("a", expect=expect), [answer("a", None, text=" 4")], None)
    assert outcomes[0].status == "pass" and outcomes[0].expect_ok
    outcomes = evaluate(prompts("a", expect=expect), [answer("a", None, text=" 4")],
                        reference_of(a=[1]))
    assert outcomes[0].status == "fail" and "no token ids" in outcomes[0].problem


def test_a_wrong_answer_names_what_was_expected_and_what_came_back():
    outcomes = evaluate(prompts("sum", expect=Expectation("regex", r"^\s*4\b")),
                        [answer("sum", [7], text=" five, or so")], None)
    assert outcomes[0].status == "fail" and outcomes[0].expect_ok is False
    assert outcomes[0].problem == "expected regex \"^\\\\s*4\\\\b\", got ' five, or so'"


def test_a_prompt_the_reference_never_answered_fails():
    outcomes = evaluate(prompts("a", "new"), [answer("a", [1]), answer("new", [2])],
                        reference_of(a=[1]))
    assert [o.status for o in outcomes] == ["pass", "fail"]
    assert "reference has no answer" in outcomes[1].problem
