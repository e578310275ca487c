"""Fact tests as data: every `tests/facts/<fact>/<case>.txt` parses to its `<case>.json`.

A case is two files. The `.txt` holds the raw output of the fact's command, after a
first line `# source: ...` saying where it was captured (or what it was constructed
from); the `.json` holds the value the fact's parser must make of it, in the form
`ascendctl facts --json` prints. A source of the form `<capture> lines A-B` names a
capture in tests/fixtures: the text must be exactly those lines of it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ascendctl.facts import Fact, KeyedFact, all_facts, fact_named
from ascendctl.facts.node import jsonable

TESTS = Path(__file__).resolve().parents[1]
FACTS_DIR = TESTS / "facts"
FIXTURES = TESTS / "fixtures"
CASES = sorted(FACTS_DIR.glob("*/*.txt"))
LINES = re.compile(r"^# source: (?P<file>[\w.\-]+\.txt) lines (?P<a>\d+)-(?P<b>\d+)(?: \(.+\))?$")


def read_case(path: Path) -> tuple[str, str]:
    source, _, text = path.read_text(encoding="utf-8").partition("\n")
    return source, text


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_case_parses_to_its_json(case):
    fact = fact_named(case.parent.name)
    assert isinstance(fact, (Fact, KeyedFact)), f"{fact.name} has no parser of its own (a Derived fact)"
    _, text = read_case(case)
    expected = json.loads(case.with_suffix(".json").read_text(encoding="utf-8"))
    assert jsonable(fact.parse(text)) == expected


@pytest.mark.parametrize("case", [c for c in CASES if LINES.match(read_case(c)[0])], ids=case_id)
def test_case_is_the_lines_its_source_names(case):
    source, text = read_case(case)
    m = LINES.match(source)
    capture = (FIXTURES / m["file"]).read_text(encoding="utf-8").split("\n")
    a, b = int(m["a"]), int(m["b"])
    assert 1 < a <= b <= len(capture), f"{m['file']} has {len(capture)} lines"
    assert text == "\n".join(capture[a - 1:b]) + "\n"


def test_every_case_has_a_source_and_its_two_files():
    assert len(CASES) >= 100
    for case in CASES:
        source, _ = read_case(case)
        assert source.startswith("# source: ") and len(source) > len("# source: ") + 10, case
        assert case.with_suffix(".json").is_file(), f"{case_id(case)}: no .json"
    for expected in FACTS_DIR.glob("*/*.json"):
        assert expected.with_suffix(".txt").is_file(), f"{case_id(expected)}: no .txt"
    for directory in FACTS_DIR.iterdir():
        assert directory.is_dir() and fact_named(directory.name), directory


def test_every_fact_with_a_parser_has_a_case():
    parsed = {f.name for f in all_facts() if isinstance(f, (Fact, KeyedFact))}
    with_cases = {c.parent.name for c in CASES}
    assert parsed - with_cases == set()
