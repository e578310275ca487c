"""How a quality gate run is shown: a Rich table (one row per prompt), JUnit XML (one
testcase per prompt, plus one for the agreement in agreement mode)."""

from __future__ import annotations

from typing import Any

from ascendctl.junit import FAILURE, PASSED, Case, JUnitReport, Suite
from ascendctl.inventory.prompts import truncate
from ascendctl.quality.result import ERROR_CHARS, PromptOutcome, QualityReport

CELL_CHARS = 60


def _held_against(outcome: PromptOutcome) -> str:
    parts = []
    if outcome.expect is not None:
        parts.append(f"{outcome.expect.kind}: {truncate(outcome.expect.value, CELL_CHARS)}")
    if outcome.reference_text is not None:
        parts.append(f"reference: {truncate(outcome.reference_text, CELL_CHARS)}")
    return "\n".join(parts)


def _agreement_cell(outcome: PromptOutcome) -> str:
    if outcome.agreement is None:
        return ""
    if outcome.diverges_at is None:
        return "1.00"
    return f"{outcome.agreement:.2f} (token {outcome.diverges_at})"


def quality_table(report: QualityReport) -> Any:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    title = (f"{report.gate} on {report.node} · release {report.release} · "
             f"{report.prompt_set.count} prompts from {report.prompt_set.source}")
    if report.reference is not None:
        title += f" · reference: {report.reference.describe()}"
    table = Table(title=escape(title))
    for column in ("prompt", "result", "agreement", "expected / reference", "answer"):
        table.add_column(column, overflow="fold")
    for outcome in report.outcomes:
        # answers and prompts are the model's and the operator's text, never markup, and
        # shown escaped (truncate): an answer's ESC or C1 bytes must not drive the terminal
        result = Text("FAIL", "red") if outcome.status == "fail" else Text("pass", "green")
        answer = (Text(truncate(outcome.error, ERROR_CHARS), "red") if outcome.error
                  else Text(truncate(outcome.text or "", CELL_CHARS)))
        table.add_row(Text(outcome.id), result, _agreement_cell(outcome),
                      Text(_held_against(outcome)), answer)
    if report.agreement is not None:
        a = report.agreement
        table.caption = escape(f"agreement {a.mean:.3f} (min {a.min_agreement:g}); "
                         f"{a.exact_rate:.0%} of answers identical to the reference")
    return table


def failure_lines(report: QualityReport) -> list[str]:
    """Each failed or diverged prompt: what it was held against and what came back."""
    lines = []
    for outcome in report.outcomes:
        if outcome.status != "fail" and not (outcome.diverged and not report.passed):
            continue
        head = f"{outcome.id} ({outcome.prompt!r})"
        if outcome.error:
            lines.append(f"{head}: {truncate(outcome.error, ERROR_CHARS)}")
            continue
        if outcome.expect is not None and outcome.expect_ok is False:
            lines.append(f"{head}: expected {outcome.expect.describe()}")
        if outcome.reference_text is not None and outcome.diverged:
            lines.append(f"{head}: agreement {outcome.agreement:.2f}, differs from token "
                         f"{outcome.diverges_at}; reference "
                         f"{truncate(outcome.reference_text, 120)!r}")
        lines.append(f"    got {truncate(outcome.text or '', 120)!r}")
    return lines


def junit_report(report: QualityReport) -> JUnitReport:
    """One testcase per prompt, plus one for the agreement in agreement mode."""
    cases: list[tuple[str, str, bool, float]] = []
    for outcome in report.outcomes:
        detail = [f"answer: {truncate(outcome.text or '', 400)}"]
        if outcome.expect is not None:
            detail.insert(0, f"expected: {outcome.expect.describe()}")
        if outcome.agreement is not None:
            detail.append(f"agreement with the reference: {outcome.agreement:.3f}"
                          + ("" if outcome.diverges_at is None
                             else f" (differs from token {outcome.diverges_at})"))
        message = outcome.problem or "pass"
        cases.append((f"prompt.{outcome.id}", message + "\n" + "\n".join(detail),
                      outcome.status == "fail", outcome.seconds or 0.0))
    if report.reference is not None:
        agreement = report.agreement
        if agreement is not None:
            text = (f"agreement {agreement.mean:.3f} (min {agreement.min_agreement:g}) with "
                    f"{report.reference.describe()}; {agreement.exact_rate:.0%} identical")
            cases.append(("agreement", text, not agreement.passed, 0.0))
        else:
            cases.append(("agreement", f"reference {report.reference.describe()}",
                          report.reference.kind == "missing", 0.0))
    classname = f"quality.{report.cluster}"
    suite = Suite(f"quality {report.cluster} {report.release}",
                  [Case(classname, name, FAILURE, text.splitlines()[0][:300], "quality", text,
                        seconds) if failed
                   else Case(classname, name, PASSED, text=text, seconds=seconds)
                   for name, text, failed, seconds in cases],
                  seconds=report.seconds, hostname=report.node)
    return JUnitReport("ascendctl quality gate", report.seconds, [suite])
