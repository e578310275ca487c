"""How `ascendctl bench --compare/--envelope/--soak/--long-tail` shows a promotion run:
text lines, JSON (PromotionRun.as_dict) and JUnit XML (one testcase per gate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascendctl.exitcodes import Exit
from ascendctl.gates.runner import PromotionRun
from ascendctl.junit import FAILURE, PASSED, Case, JUnitReport, Suite


@dataclass
class PromotionReport:
    cluster: str
    run: PromotionRun
    seconds: float

    @property
    def node(self) -> str:
        return self.run.node

    @property
    def stored(self) -> str:
        paths = [r.html or r.path for r in self.run.results if r.path]
        return ", ".join(p for p in paths if p) or "nothing"

    @property
    def exit_code(self) -> Exit:
        return Exit.OK if self.run.passed else Exit.FAILED

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "seconds": round(self.seconds, 3),
                **self.run.as_dict()}


def lines(report: PromotionReport) -> list[str]:
    out = [f"{report.run.release} on {report.run.node} (serving group {report.run.group})"]
    for stored in report.run.results:
        out.append(f"  {stored.line}")
        if stored.html or stored.path:
            out.append(f"    evidence: {stored.html or stored.path}")
    if not report.run.results:
        out.append("  no gate ran")
    return out


def junit_report(report: PromotionReport) -> JUnitReport:
    classname = f"promotion.{report.cluster}"
    cases = []
    for stored in report.run.results:
        result = stored.result
        text = f"{result.summary}\nevidence: {stored.html or stored.path}"
        cases.append(Case(classname, result.gate, PASSED, text=text) if result.passed else
                     Case(classname, result.gate, FAILURE, result.summary, "promotion", text))
    suite = Suite(f"promotion {report.cluster} {report.run.group}", cases,
                  seconds=report.seconds, hostname=report.node)
    return JUnitReport("ascendctl bench", report.seconds, [suite])
