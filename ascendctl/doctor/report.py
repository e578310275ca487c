"""Doctor's verdict, its exit code, and how findings are printed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascendctl.doctor.collect import NodeCollection
from ascendctl.doctor.scan import Finding
from ascendctl.exitcodes import Exit

LINE_SHOWN = 220


@dataclass
class DoctorReport:
    cluster: str
    since_s: int
    collections: Sequence[NodeCollection]
    findings: Sequence[Finding]
    bundle: Optional[str] = None

    @property
    def unreachable(self) -> list[NodeCollection]:
        return [c for c in self.collections if not c.ok]

    @property
    def exit_code(self) -> Exit:
        if self.unreachable:
            return Exit.UNREACHABLE
        severities = {f.severity for f in self.findings}
        if "error" in severities:
            return Exit.FAILED
        if "warning" in severities:
            return Exit.WARNINGS
        return Exit.OK

    def verdict(self) -> str:
        errors = [f for f in self.findings if f.severity == "error"]
        warnings = [f for f in self.findings if f.severity == "warning"]
        parts = []
        if errors:
            parts.append(f"{len(errors)} error finding(s)")
        if warnings:
            parts.append(f"{len(warnings)} warning(s)")
        if self.unreachable:
            parts.append("not collected from " + ", ".join(
                f"{c.node} ({c.status}: {c.error})" for c in self.unreachable))
        if not parts:
            return "no known error signature in the collected logs"
        roots = [f for f in self.findings if f.root_cause]
        lead = "".join(
            f"; probable root cause{f' in serving group {r.group}' if r.group else ''}: "
            f"{r.id} on {r.node} ({r.title})" for r in roots)
        return "; ".join(parts) + lead

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "since_s": self.since_s,
            "nodes": [{"name": c.node, "address": c.address, "rank": c.rank,
                       "group": c.group,
                       "status": c.status, "error": c.error, "files": len(c.files),
                       "bytes": sum(len(t) for t in c.files.values()),
                       "seconds": c.seconds, "notes": c.notes} for c in self.collections],
            "findings": [f.as_dict() for f in self.findings],
            "bundle": self.bundle,
            "verdict": self.verdict(),
            "exit_code": int(self.exit_code),
        }


def _when(stamp: Optional[str]) -> str:
    if not stamp:
        return "-"
    return stamp.replace("T", " ")[:19]


def print_report(report: DoctorReport, console: Any) -> None:
    from rich.markup import escape

    nodes = ", ".join(
        f"{c.node} ({len(c.files)} files, {c.seconds:.1f} s)" if c.ok else
        f"{c.node} ([red]{c.status}[/red]: {escape(str(c.error))})"
        for c in report.collections)
    console.print(f"doctor: {report.cluster}: collected the last {report.since_s} s from {nodes}")
    shown = [f for f in report.findings if f.severity != "info"]
    for index, f in enumerate(shown, start=1):
        seen = _when(f.first_seen) + (f" … {_when(f.last_seen)}"
                                      if f.last_seen and f.last_seen != f.first_seen else "")
        console.print(_heading(index, f, f"[bold]{f.node}[/bold]"
                               + (f" (group {escape(f.group)})" if f.group else "")
                               + f", {f.count} line(s) ({seen})"))
        line = _shown(f.line)
        console.print(f"   log:   {escape(line)}")
        console.print(f"   cause: {escape(f.cause)}")
        console.print(f"   fix:   {escape(f.fix)}")
        console.print(f"   in:    {escape(f.file)}")
    info = [f for f in report.findings if f.severity == "info"]
    if info:
        console.print("\ninfo: " + "; ".join(f"{f.id} {f.title} on {f.node} ({f.count}×)"
                                             for f in info))
    if report.bundle:
        console.print(f"\nbundle: {report.bundle}")
    style = {0: "green", 3: "yellow"}.get(int(report.exit_code), "red")
    console.print(f"[{style}]{escape(report.verdict())}[/{style}]")


def _heading(index: int, finding: Any, where: str) -> str:
    """A finding's first line, as the report and `doctor explain` both print it: number,
    severity, id and title, then WHERE (node or line numbers) and its role in the chain."""
    from rich.markup import escape

    style = {"error": "red", "warning": "yellow"}[finding.severity]
    tags = []
    if finding.root_cause:
        tags.append("[bold]probable root cause[/bold]")
    if finding.umbrella:
        tags.append("consequence: see the earlier findings")
    return (f"\n[{style}]{index}. {finding.severity.upper()} {finding.id}[/{style}] "
            f"{escape(finding.title)} — {where}" + (f"  ← {'; '.join(tags)}" if tags else ""))


def _shown(line: str) -> str:
    return line if len(line) <= LINE_SHOWN else line[:LINE_SHOWN] + " …"


def _fields(values: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def print_explanation(expl: Any, console: Any) -> None:
    """`doctor explain`: each finding with its line numbers, the first line, the fields
    extracted, the cause and the fix; then the verdict."""
    from rich.markup import escape

    cut = (f"; {expl.cut_lines} line(s) longer than 1 MiB matched on their first 1 MiB"
           if expl.cut_lines else "")
    console.print(f"doctor explain: {escape(expl.source)}: {expl.lines} lines, "
                  f"{expl.bytes} bytes{cut}")
    shown = [f for f in expl.findings if f.severity != "info"]
    for index, f in enumerate(shown, start=1):
        numbers = ", ".join(str(m.line) for m in f.matches)
        more = f" (+{f.count - len(f.matches)} more)" if f.count > len(f.matches) else ""
        console.print(_heading(index, f, f"{f.count} line(s): {numbers}{more}"))
        first = f.matches[0]
        line = _shown(first.text)
        console.print(f"   line {first.line}: {escape(line)}")
        if first.values:
            console.print(f"   fields: {escape(_fields(first.values))}")
        console.print(f"   cause: {escape(f.cause)}")
        console.print(f"   fix:   {escape(f.fix)}")
    info = [f for f in expl.findings if f.severity == "info"]
    if info:
        console.print("\ninfo: " + "; ".join(
            f"{f.id} {escape(f.title)} ({f.count}×, first at line {f.first_line})"
            for f in info))
    style = {0: "green", 3: "yellow"}.get(int(expl.exit_code), "red")
    console.print(f"[{style}]{escape(expl.verdict())}[/{style}]")
