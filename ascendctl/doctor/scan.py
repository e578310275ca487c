"""Match collected logs against the signature table (pure: texts in, findings out).

One finding per (signature, node), with the number of matching lines, the first line,
when it was first and last seen, and where (the bundle path). Findings are ordered by
when they were first seen, so the earliest error - usually the cause - comes first;
`umbrella` signatures (e.g. "EngineCore failed to start") point back at it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ascendctl.doctor.signatures import Signature

# journalctl -o short-iso-precise: "2026-11-29T10:35:26.432237+0000 node0 ident[pid]: msg"
ISO_PREFIX = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{4}|Z)?)\s")
MAX_LINE = 400
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def source_kind(path: str) -> Optional[str]:
    """Which signatures apply to a collected file: by its top directory in the bundle."""
    top = path.split("/", 1)[0]
    return {"journal": "journal", "plog": "plog", "kernel": "kernel", "npu": "npu"}.get(top)


@dataclass
class Finding:
    id: str
    title: str
    severity: str
    node: str
    count: int
    line: str                      # the first matching line (trimmed)
    file: str                      # where in the bundle: <node>/<path>
    first_seen: Optional[str]
    last_seen: Optional[str]
    cause: str
    fix: str
    umbrella: bool = False
    values: dict[str, Any] = field(default_factory=dict)   # named groups of the first match
    distinct_lines: int = 1
    root_cause: bool = False       # the earliest error of its serving group's collection
    group: Optional[str] = None    # the serving group (several in the inventory)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _timestamp(line: str) -> Optional[str]:
    match = ISO_PREFIX.match(line)
    return match.group(1) if match else None


def _normalize(line: str) -> str:
    """A line without its timestamp, pids and numbers: to count distinct messages."""
    body = ISO_PREFIX.sub("", line)
    return re.sub(r"\d+", "#", body)


def scan_texts(node: str, files: Mapping[str, str], signatures: Iterable[Signature]
               ) -> list[Finding]:
    """Findings for one node's collected files (compare-signatures excluded)."""
    table = [s for s in signatures if s.compare is None]
    found: dict[str, Finding] = {}
    distinct: dict[str, set[str]] = {}
    for path in sorted(files):
        kind = source_kind(path)
        if kind is None:
            continue
        text = files[path]
        # a signature none of whose literals is in the file cannot match any of its lines
        candidates = [s for s in table if kind in s.sources and s.may_match(text)]
        if not candidates:
            continue
        for line in text.splitlines():
            for sig in candidates:
                match = sig.search(line)
                if match is None:
                    continue
                when = _timestamp(line)
                finding = found.get(sig.id)
                if finding is None:
                    found[sig.id] = Finding(
                        id=sig.id, title=sig.title, severity=sig.severity, node=node,
                        count=1, line=line.strip()[:MAX_LINE], file=f"{node}/{path}",
                        first_seen=when, last_seen=when, cause=sig.cause, fix=sig.fix,
                        umbrella=sig.umbrella,
                        values=sig.values(match))
                    distinct[sig.id] = {_normalize(line)}
                else:
                    finding.count += 1
                    distinct[sig.id].add(_normalize(line))
                    if when and (finding.first_seen is None or when < finding.first_seen):
                        finding.first_seen = when
                    if when and (finding.last_seen is None or when > finding.last_seen):
                        finding.last_seen = when
    for sig_id, finding in found.items():
        finding.distinct_lines = len(distinct[sig_id])
    return list(found.values())


def compare_findings(collections: Mapping[str, Mapping[str, str]],
                     signatures: Iterable[Signature]) -> list[Finding]:
    """Signatures with `compare`: one finding when the value differs across ports/nodes."""
    findings = []
    for sig in signatures:
        if sig.compare is None:
            continue
        seen: dict[str, list[str]] = {}      # value → ["node0 port 3", ...]
        first_line: dict[str, tuple[str, str]] = {}
        for node, files in collections.items():
            for path in sorted(files):
                if source_kind(path) not in sig.sources:
                    continue
                for line in files[path].splitlines():
                    match = sig.search(line)
                    if match is None:
                        continue
                    value = match.group(sig.compare)
                    where = f"{node} " + (f"port {match.group('dev')}"
                                          if "dev" in match.groupdict() else path)
                    seen.setdefault(value, []).append(where)
                    first_line.setdefault(value, (line.strip()[:MAX_LINE], f"{node}/{path}"))
        if len(seen) < 2:
            continue
        minority = min(seen, key=lambda v: len(seen[v]))
        line, where = first_line[minority]
        summary = "; ".join(f"{sig.compare}={value} on {_places(places)}"
                            for value, places in sorted(seen.items()))
        findings.append(Finding(
            id=sig.id, title=sig.title, severity=sig.severity,
            node=where.split("/", 1)[0], count=sum(len(p) for p in seen.values()),
            line=line, file=where, first_seen=None, last_seen=None,
            cause=f"{sig.cause} Seen: {summary}.", fix=sig.fix,
            values={sig.compare: minority}, distinct_lines=len(seen)))
    return findings


def _places(places: list[str]) -> str:
    nodes: dict[str, list[str]] = {}
    for place in places:
        node, _, rest = place.partition(" ")
        nodes.setdefault(node, []).append(rest)
    return ", ".join(f"{node} ({len(items)} port{'s' if len(items) != 1 else ''})"
                     for node, items in nodes.items())


def order_findings(findings: list[Finding]) -> list[Finding]:
    """Errors before warnings before info; within, the earliest first (undated last).
    The earliest non-umbrella error is marked as the probable root cause."""
    ordered = sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity],
                                              f.first_seen is None, f.first_seen or "",
                                              f.node, f.id))
    errors = [f for f in ordered if f.severity == "error" and not f.umbrella]
    if errors:
        errors[0].root_cause = True
    return ordered


def scan_collections(collections: Mapping[str, Mapping[str, str]],
                     signatures: Iterable[Signature]) -> list[Finding]:
    """Every node's findings plus the cross-node comparisons, ordered."""
    table = list(signatures)
    findings: list[Finding] = []
    for node, files in collections.items():
        findings.extend(scan_texts(node, files, table))
    findings.extend(compare_findings(collections, table))
    return order_findings(findings)
