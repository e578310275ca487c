"""How a gate run reads: the one-line summary a rolling deploy reports, the table, the
failed prompts with what was expected and what came back, JUnit with one testcase per
prompt; and the CLI refusing what it cannot run before anything is contacted."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.load import load_inventory
from ascendctl.quality.gate import (
    NodeAnswer, ReferenceAnswers, agreement_figures, check_fits, evaluate, gate_spec, problems_of,
)
from ascendctl.inventory.prompts import Expectation, PromptSet, QualityPrompt
from ascendctl.junit import junit_xml
from ascendctl.quality.report import failure_lines, junit_report, quality_table
from ascendctl.quality.result import PromptSetInfo, QualityReport, Reference

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"


def report_of(prompt_set: PromptSet, answers: list[NodeAnswer],
              reference: ReferenceAnswers | None, mode: str) -> QualityReport:
    outcomes = evaluate(prompt_set, answers, reference)
    problems = problems_of(outcomes)
    agreement = None
    if reference is not None:
        agreement = agreement_figures(outcomes, 0.9)
        if not agreement.passed:
            problems.append(f"agreement {agreement.mean:.3f} < min_agreement 0.9 with "
                            f"{reference.reference.describe()}")
    return QualityReport(cluster="lab", node="node0", release="r-new", stamp="s", mode=mode,
                         prompt_set=PromptSetInfo(prompt_set.source, "d" * 64,
                                                  len(prompt_set.prompts)),
                         max_tokens=16, outcomes=outcomes,
                         reference=reference.reference if reference else None,
                         agreement=agreement, problems=problems, seconds=1.5)


EXPECTING = PromptSet("/srv/q.yaml", (
    QualityPrompt("sum", prompt="2 + 2 =", expect=Expectation("contains", "4")),
    QualityPrompt("name", prompt="[bold]Your name?[/bold]", expect=Expectation("exact", "Ada")),
))


def test_a_wrong_answer_is_named_with_what_was_expected_and_what_came_back():
    report = report_of(EXPECTING, [NodeAnswer("sum", " 4", [1], "length", None, 0.2),
                                   NodeAnswer("name", " [red]Bob[/red]", [2], "stop", None, 0.3)],
                       None, "prompts")
    assert not report.passed and report.exit_code == Exit.FAILED
    assert report.summary() == (
        "quality gate (prompts) failed on node0 for release r-new: 1 of 2 prompts failed "
        "(name: expected exact \"Ada\", got ' [red]Bob[/red]')")
    assert failure_lines(report) == [
        "name ('[bold]Your name?[/bold]'): expected exact \"Ada\"",
        "    got ' [red]Bob[/red]'"]
    data = report.as_dict()
    assert data["status"] == "fail" and data["counts"] == {"prompts": 2, "failed": 1,
                                                           "diverged": 0}
    assert data["prompts"][1]["expect"] == {"kind": "exact", "value": "Ada"}
    # the answer is the model's text, never markup: it is shown as written
    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200, no_color=True).print(quality_table(report))
    assert "[red]Bob[/red]" in out.getvalue() and "[bold]Your name?" not in out.getvalue()


def test_junit_has_one_testcase_per_prompt(tmp_path):
    report = report_of(EXPECTING, [NodeAnswer("sum", " 4", [1], "length", None, 0.2),
                                   NodeAnswer("name", None, None, None, "/v1/completions "
                                              "timed out: timed out", 30.0)], None, "prompts")
    path = tmp_path / "q.xml"
    path.write_bytes(junit_xml(junit_report(report)))
    suite = JUnitXml.fromfile(str(path))
    cases = {c.name: c for s in suite for c in s}
    assert list(cases) == ["prompt.sum", "prompt.name"]
    assert cases["prompt.sum"].is_passed and not cases["prompt.name"].is_passed
    assert "timed out" in cases["prompt.name"].result[0].message
    assert suite.failures == 1 and suite.tests == 2


def reference(tokens: dict[str, list[int]]) -> ReferenceAnswers:
    return ReferenceAnswers(Reference("record", release="r-old", stamp="20261201T000000Z"),
                            {k: NodeAnswer(k, f"old {k}", v, None, None, None)
                             for k, v in tokens.items()})


AGREEING = PromptSet("builtin", tuple(QualityPrompt(f"p{i}", prompt=f"prompt {i}")
                                      for i in range(4)))


def test_an_agreement_failure_names_the_gate_the_reference_and_the_differing_answers(tmp_path):
    ref = reference({f"p{i}": [1, 2, 3, 4] for i in range(4)})
    answers = [NodeAnswer("p0", "same", [1, 2, 3, 4], "length", None, 0.1)] + [
        NodeAnswer(f"p{i}", f"new {i}", [9, 2, 3, 4], "length", None, 0.1) for i in (1, 2, 3)]
    report = report_of(AGREEING, answers, ref, "agree_with_previous")
    assert report.summary() == (
        "quality gate (agree_with_previous) failed on node0 for release r-new: agreement "
        "0.250 < min_agreement 0.9 with release r-old (gate record 20261201T000000Z)")
    lines = failure_lines(report)
    assert lines[:2] == ["p1 ('prompt 1'): agreement 0.00, differs from token 0; "
                         "reference 'old p1'", "    got 'new 1'"]
    assert len(lines) == 6          # the three differing prompts, not the identical one
    path = tmp_path / "a.xml"
    path.write_bytes(junit_xml(junit_report(report)))
    cases = {c.name: c for s in JUnitXml.fromfile(str(path)) for c in s}
    # a differing answer is not a failed prompt; the set's agreement is the testcase that fails
    assert [n for n, c in cases.items() if not c.is_passed] == ["agreement"]
    assert "agreement 0.250 (min 0.9)" in cases["agreement"].result[0].message


def test_a_passing_agreement_summary_gives_the_figure_and_the_reference():
    ref = reference({f"p{i}": [1, 2, 3, 4] for i in range(4)})
    answers = [NodeAnswer(f"p{i}", "x", [1, 2, 3, 4], "length", None, 0.1) for i in range(3)]
    answers.append(NodeAnswer("p3", "x", [1, 2, 3, 7], "length", None, 0.1))
    report = report_of(AGREEING, answers, ref, "agree_with_previous")
    assert report.passed and report.agreement.mean == pytest.approx(0.9375)
    assert report.summary() == (
        "quality gate (agree_with_previous) passed on node0 for release r-new: 4 prompts "
        "answered, agreement 0.938 >= 0.9 with release r-old (gate record 20261201T000000Z)")
    assert report.as_dict()["agreement"] == {"mean": 0.9375, "exact_rate": 0.75,
                                             "min_agreement": 0.9, "compared": 4}


def inventory(tmp_path: Path, quality: dict | None, max_model_len: int = 256) -> Path:
    data = yaml.safe_load(GOOD.read_text())
    data["all"]["vars"]["serving"]["max_model_len"] = max_model_len
    if quality is not None:
        data["all"]["vars"]["slo"] = {"quality": quality}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_without_slo_quality_the_gate_is_agreement_over_the_builtin_set(tmp_path):
    spec = gate_spec(load_inventory(inventory(tmp_path, None)))
    assert spec.agree_with_previous and spec.min_agreement == 0.9
    assert spec.prompt_set().source == "builtin"


def test_token_limits_the_engine_would_refuse_are_bad_input(tmp_path):
    # the inventory's own gate is refused when the inventory loads (test_quality_hostile.py);
    # the default gate (no slo.quality) when it would run
    inv = load_inventory(inventory(tmp_path, None, max_model_len=32))
    with pytest.raises(InputError, match="max_tokens 32 leaves no room for the prompt in "
                                         "serving.max_model_len 32"):
        check_fits(inv, gate_spec(inv).prompt_set(), gate_spec(inv).max_tokens)
    check_fits(inv, gate_spec(inv).prompt_set(), 31)


def test_the_cli_refuses_baseline_without_quality_and_touches_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ascendctl", "bench", "-i",
                             str(inventory(tmp_path, None)), "--baseline"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == Exit.USAGE and "--baseline goes with --quality" in result.stderr
    big = inventory(tmp_path, {"agree_with_previous": True, "max_tokens": 300})
    result = subprocess.run([sys.executable, "-m", "ascendctl", "bench", "-i", str(big),
                             "--quality"], capture_output=True, text=True, timeout=60,
                            env={"TEST_API_KEY": "x", "PATH": "/usr/bin:/bin"})
    assert result.returncode == Exit.USAGE, result.stderr
    assert "max_tokens 300 leaves no room" in result.stderr


def test_junit_stays_well_formed_whatever_the_model_answers(tmp_path):
    raw = "bell\x07 nul\x00 esc\x1b ok\u00e9 \ufffe end"
    report = report_of(EXPECTING, [NodeAnswer("sum", raw, [1], "length", None, 0.2),
                                   NodeAnswer("name", raw, [2], "stop", None, 0.3)],
                       None, "prompts")
    path = tmp_path / "q.xml"
    path.write_bytes(junit_xml(junit_report(report)))
    cases = {c.name: c for s in JUnitXml.fromfile(str(path)) for c in s}
    failure = cases["prompt.sum"].result[0]
    assert "bell\\x07 nul\\x00 esc\\x1b ok\u00e9 \\ufffe end" in failure.text


HOSTILE_ANSWER = ("\x1b]0;owned\x07\x1b[2J\x9b31m red\u202eevil\ud800 "
                  "line\nnext\ttab\rover \u00e9\u4e2d")
ESCAPED_ANSWER = ("\\x1b]0;owned\\x07\\x1b[2J\\x9b31m red\\u202eevil\\ud800 "
                  "line\\nnext\\ttab\\rover \u00e9\u4e2d")


def test_an_answer_cannot_drive_the_terminal_it_is_shown_on():
    """ESC sequences, C1 controls, bidirectional overrides and lone surrogates from the
    engine are shown escaped in the table, the failure lines and the summary; printable
    text of any language is shown as it is."""
    from rich.console import Console

    report = report_of(EXPECTING, [
        NodeAnswer("sum", HOSTILE_ANSWER, [1], "stop", None, 0.2),
        NodeAnswer("name", None, None, None, "/v1/completions answered 500: "
                   + HOSTILE_ANSWER, 0.3)], None, "prompts")
    out = StringIO()
    Console(file=out, width=400, no_color=True).print(quality_table(report))
    shown = [*out.getvalue().splitlines(), *failure_lines(report), report.summary()]
    assert all(line.isprintable() for line in shown), [l for l in shown if not l.isprintable()]
    assert "got '" + ESCAPED_ANSWER + "'" in failure_lines(report)[1].replace("\\\\", "\\")
    assert f"answered 500: {ESCAPED_ANSWER}" in failure_lines(report)[2]
    assert f"answered 500: {ESCAPED_ANSWER}" in report.summary()
    table = out.getvalue()
    assert "\\x1b]0;owned" in table and "\u00e9\u4e2d" in table
    # the record keeps what the engine returned
    assert report.as_dict()["prompts"][0]["text"] == HOSTILE_ANSWER
