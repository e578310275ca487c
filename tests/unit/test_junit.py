"""The one JUnit writer: counts and times summed per suite and in total, every outcome in
the element CI tools read, and XML that parses whatever bytes a node or a model sent."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from ascendctl.junit import (
    ERROR, FAILURE, PASSED, SKIPPED, Case, JUnitReport, Suite, junit_xml, write_junit, xml_text,
)

HOSTILE = "esc \x1b[31m nul \x00 bell \x07 ffff \uffff lone \ud800 & <tag> \"quoted\""


def report() -> JUnitReport:
    return JUnitReport("ascendctl test", 2.5, [
        Suite("node0", [Case("c.node0", "ok", PASSED, text="fine", seconds=0.25),
                        Case("c.node0", "quiet", PASSED, seconds=0.5),
                        Case("c.node0", "bad", FAILURE, HOSTILE, "fail", "body " + HOSTILE,
                             attributes=(("file", "play.yaml"), ("line", "7")))],
              hostname="198.18.0.11", timestamp="2025-01-01T00:00:00"),
        Suite("node1", [Case("c.node1", "gone", ERROR, "unreachable", "timeout", "no answer"),
                        Case("c.node1", "n/a", SKIPPED, "not applicable")], seconds=9.0),
    ])


def test_counts_times_and_outcomes_parse_with_junitparser(tmp_path):
    path = tmp_path / "out" / "junit.xml"
    write_junit(report(), path)
    xml = JUnitXml.fromfile(str(path))
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (5, 1, 1, 1)
    node0, node1 = list(xml)
    assert (node0.tests, node0.failures, node0.time) == (3, 1, 0.75)   # the cases' sum
    assert (node1.tests, node1.errors, node1.skipped, node1.time) == (2, 1, 1, 9.0)
    cases = {c.name: c for suite in xml for c in suite}
    assert cases["ok"].is_passed and cases["ok"].system_out == "fine"
    assert cases["quiet"].is_passed and cases["quiet"].system_out is None
    (failure,) = cases["bad"].result
    assert isinstance(failure, Failure) and failure.type == "fail"
    (error,) = cases["gone"].result
    assert isinstance(error, Error) and error.type == "timeout" and error.text == "no answer"
    (skipped,) = cases["n/a"].result
    assert isinstance(skipped, Skipped) and skipped.message == "not applicable"


def test_characters_xml_cannot_carry_are_escaped_in_text_and_attributes():
    root = ET.fromstring(junit_xml(report()))       # a parser refuses invalid XML outright
    case = root.find("./testsuite/testcase[@name='bad']")
    assert case is not None and case.get("file") == "play.yaml" and case.get("line") == "7"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == xml_text(HOSTILE)
    assert failure.text == "body " + xml_text(HOSTILE)
    assert "\\x1b[31m" in failure.get("message", "") and "\\x00" in failure.get("message", "")
    assert "\\uffff" in failure.text and "\\ud800" in failure.text
    assert "& <tag> \"quoted\"" in failure.text                 # escaped, not lost
    assert root.find("./testsuite").get("hostname") == "198.18.0.11"


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="unknown JUnit outcome"):
        junit_xml(JUnitReport("x", 0, [Suite("s", [Case("c", "n", "flaky")])]))


def test_a_large_report_is_written_in_linear_time():
    import time

    cases = [Case("c", f"case{i}", FAILURE if i % 3 else PASSED, "m" * 200, "f", "t" * 2000)
             for i in range(20_000)]
    started = time.monotonic()
    data = junit_xml(JUnitReport("big", 1.0, [Suite("s", cases)]))
    elapsed = time.monotonic() - started
    assert JUnitXml.fromstring(data.decode()).tests == 20_000
    assert elapsed < 10, f"{elapsed:.1f} s for 20000 cases (45 MB)"
