"""`ascendctl doctor explain FILE`: the signature table run over a saved log, offline.

For the log someone pastes into a ticket: no inventory, no host contacted. Every line is
matched against every signature (whatever the node-side source the signature is meant
for: a pasted log may be anything); each signature that matched is one finding, with the
number of lines, the first line numbers, the extracted fields, the cause and the fix.
Findings are ordered errors first, then by the line they first appear on; the earliest
error that is not a consequence is the probable root cause.

Linear in the size of the log: a block of lines is only matched line by line against the
signatures whose literal text occurs in the block (Signature.may_match), and every regex
is bounded per occurrence of its literal text. What is printed is redacted with the node
collector's redaction (secrets by name, header and shape), and an extracted field is only
shown as it appears in the redacted line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl.doctor.logfile import LogReader
from ascendctl.doctor.signatures import Signature
from ascendctl.exitcodes import Exit

MATCHES_KEPT = 20          # per signature: the first matching lines, with their fields
LINE_KEPT = 4096           # characters of a matching line kept to redact (memory bound)
LINE_SHOWN = 400           # characters of a (redacted) log line in the output
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
REDACTED = "[REDACTED]"


@dataclass
class LineMatch:
    line: int
    text: str
    values: dict[str, Any]


@dataclass
class LogFinding:
    id: str
    title: str
    severity: str
    cause: str
    fix: str
    umbrella: bool = False
    count: int = 0
    first_line: int = 0
    matches: list[LineMatch] = field(default_factory=list)
    root_cause: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "severity": self.severity,
                "umbrella": self.umbrella, "root_cause": self.root_cause,
                "count": self.count, "first_line": self.first_line,
                "cause": self.cause, "fix": self.fix,
                "matches": [{"line": m.line, "text": m.text, "values": m.values}
                            for m in self.matches]}


@dataclass
class Explanation:
    source: str
    lines: int
    bytes: int
    cut_lines: int
    findings: Sequence[LogFinding]

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def root(self) -> Optional[LogFinding]:
        return next((f for f in self.findings if f.root_cause), None)

    @property
    def exit_code(self) -> Exit:
        if self.count("error"):
            return Exit.FAILED
        if self.count("warning"):
            return Exit.WARNINGS
        return Exit.OK

    def verdict(self) -> str:
        errors, warnings = self.count("error"), self.count("warning")
        if not errors and not warnings:
            return "no known error signature in the log"
        parts = [f"{errors} error signature(s)"] if errors else []
        if warnings:
            parts.append(f"{warnings} warning(s)")
        root = self.root
        lead = (f"; probable root cause: {root.id} at line {root.first_line} ({root.title})"
                if root else "")
        return ", ".join(parts) + lead

    def as_dict(self) -> dict[str, Any]:
        root = self.root
        return {
            "source": self.source, "lines": self.lines, "bytes": self.bytes,
            "cut_lines": self.cut_lines,
            "findings": [f.as_dict() for f in self.findings],
            "summary": {"errors": self.count("error"), "warnings": self.count("warning"),
                        "info": self.count("info"),
                        "root_cause": ({"id": root.id, "line": root.first_line}
                                       if root else None),
                        "verdict": self.verdict()},
            "exit_code": int(self.exit_code),
        }


class _Compared:
    """A `compare` signature over the whole log: a finding only when its value differs."""

    def __init__(self, sig: Signature):
        self.sig = sig
        self.lines: dict[str, list[int]] = {}
        self.first: dict[str, tuple[int, str, dict[str, Any]]] = {}

    def add(self, number: int, line: str, values: dict[str, Any]) -> None:
        value = str(values.get(self.sig.compare or "", ""))
        self.lines.setdefault(value, []).append(number)
        self.first.setdefault(value, (number, line[:LINE_KEPT], values))

    def finding(self) -> Optional[LogFinding]:
        if len(self.lines) < 2:
            return None
        seen = "; ".join(f"{self.sig.compare}={value} on {len(numbers)} line(s) from line "
                         f"{numbers[0]}" for value, numbers in sorted(self.lines.items()))
        minority = min(self.lines, key=lambda v: (len(self.lines[v]), self.lines[v][0]))
        number, line, values = self.first[minority]
        return LogFinding(id=self.sig.id, title=self.sig.title, severity=self.sig.severity,
                          cause=f"{self.sig.cause} Seen: {seen}.", fix=self.sig.fix,
                          count=sum(len(n) for n in self.lines.values()),
                          first_line=number, matches=[LineMatch(number, line, values)])


def explain_log(reader: LogReader, signatures: Iterable[Signature],
                secrets: Sequence[str] = ()) -> Explanation:
    table = list(signatures)
    found: dict[str, LogFinding] = {}
    compared = {s.id: _Compared(s) for s in table if s.compare}
    for block in reader.blocks():
        candidates = [s for s in table if s.may_match_utf8(block.data)]
        if not candidates:
            continue
        for offset, line in enumerate(block.lines()):
            for sig in candidates:
                match = sig.search(line)
                if match is None:
                    continue
                number = block.first + offset
                if sig.id in compared:
                    compared[sig.id].add(number, line, sig.values(match))
                    continue
                finding = found.get(sig.id)
                if finding is None:
                    finding = found[sig.id] = LogFinding(
                        id=sig.id, title=sig.title, severity=sig.severity, cause=sig.cause,
                        fix=sig.fix, umbrella=sig.umbrella, first_line=number)
                finding.count += 1
                if len(finding.matches) < MATCHES_KEPT:
                    finding.matches.append(
                        LineMatch(number, line[:LINE_KEPT], sig.values(match)))
    findings = list(found.values())
    findings += [f for f in (c.finding() for c in compared.values()) if f is not None]
    for finding in findings:
        finding.matches = [_redacted(m, secrets) for m in finding.matches]
    return Explanation(source=reader.name, lines=reader.lines, bytes=reader.bytes,
                       cut_lines=reader.cut_lines, findings=_ordered(findings))


def _ordered(findings: list[LogFinding]) -> list[LogFinding]:
    ordered = sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.first_line, f.id))
    causes = [f for f in ordered if f.severity == "error" and not f.umbrella]
    if causes:
        min(causes, key=lambda f: f.first_line).root_cause = True
    return ordered


def _redacted(match: LineMatch, secrets: Sequence[str]) -> LineMatch:
    """The line redacted, then cut; each field as it appears in the redacted line, else
    redacted on its own, else withheld."""
    from ascendctl_runtime.doctor_node import redact

    line = redact(match.text.rstrip("\r"), list(secrets))
    values: dict[str, Any] = {}
    for name, value in match.values.items():
        if not isinstance(value, str) or value in line:
            values[name] = value
            continue
        alone = redact(value, list(secrets))
        values[name] = alone if alone in line else REDACTED
    shown = line if len(line) <= LINE_SHOWN else line[:LINE_SHOWN] + " …"
    return LineMatch(match.line, shown, values)
