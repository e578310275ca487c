"""JUnit XML for CI: the one writer of every report (preflight, play and deploy, bench,
quality gate). Each report maps itself to suites of cases; the counts (tests, failures,
errors, skipped) and times are summed here, and every text and attribute is made
XML-safe: a model's answer or a node's output may hold characters XML 1.0 cannot carry."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from ascendctl.fileio import write_atomic

PASSED, FAILURE, ERROR, SKIPPED = "passed", "failure", "error", "skipped"
COUNTED = {FAILURE: "failures", ERROR: "errors", SKIPPED: "skipped"}
# What XML 1.0 cannot hold at all, not even as a character reference.
XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """TEXT with every character XML cannot carry written as \\xNN / \\uNNNN."""
    return XML_INVALID.sub(lambda m: (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                                      else f"\\u{ord(m.group()):04x}"), text)


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    outcome: str = PASSED              # PASSED, FAILURE, ERROR or SKIPPED
    message: str = ""                  # the one line of a failure, an error or a skip
    kind: str = ""                     # the type of a failure or an error
    text: Optional[str] = None         # the body of a failure or an error; a pass's system-out
    seconds: float = 0.0
    attributes: tuple[tuple[str, str], ...] = ()   # more testcase attributes (file, line)


@dataclass(frozen=True)
class Suite:
    name: str
    cases: Sequence[Case]
    seconds: Optional[float] = None    # None: the sum of the cases' times
    hostname: Optional[str] = None
    timestamp: Optional[str] = None


@dataclass(frozen=True)
class JUnitReport:
    name: str
    seconds: float
    suites: Sequence[Suite] = field(default_factory=tuple)


def _element(parent: Optional[ET.Element], tag: str, **attributes: Optional[str]) -> ET.Element:
    safe = {key: xml_text(value) for key, value in attributes.items() if value is not None}
    return ET.Element(tag, safe) if parent is None else ET.SubElement(parent, tag, safe)


def _case(suite: ET.Element, case: Case) -> None:
    node = _element(suite, "testcase", classname=case.classname, name=case.name,
                    time=f"{case.seconds:.3f}", **dict(case.attributes))
    if case.outcome == PASSED:
        if case.text is not None:
            _element(node, "system-out").text = xml_text(case.text)
        return
    if case.outcome not in COUNTED:
        raise ValueError(f"unknown JUnit outcome {case.outcome!r}")
    result = _element(node, case.outcome, message=case.message,
                      type=case.kind if case.outcome != SKIPPED else None)
    if case.outcome != SKIPPED and case.text is not None:
        result.text = xml_text(case.text)


def junit_xml(report: JUnitReport) -> bytes:
    root = _element(None, "testsuites", name=report.name, time=f"{report.seconds:.3f}")
    totals = dict.fromkeys(("tests", *COUNTED.values()), 0)
    for suite in report.suites:
        node = _element(root, "testsuite", name=suite.name, hostname=suite.hostname,
                        timestamp=suite.timestamp)
        counts = dict.fromkeys(totals, 0)
        for case in suite.cases:
            _case(node, case)
            counts["tests"] += 1
            if case.outcome in COUNTED:
                counts[COUNTED[case.outcome]] += 1
        seconds = suite.seconds if suite.seconds is not None \
            else sum(case.seconds for case in suite.cases)
        for key, value in counts.items():
            node.set(key, str(value))
            totals[key] += value
        node.set("time", f"{seconds:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(report: JUnitReport, path: str | os.PathLike[str]) -> None:
    write_atomic(path, junit_xml(report), 0o644)
