"""The malformed-inventory corpus: one mistake per file, one precise error per mistake.

Each file's first line says what the error must contain: `line=N` (the line that holds
the mistake, counted by reading the file), `field=` (dotted path) and `msg=` (a phrase).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.load import load_inventory

BAD_DIR = Path(__file__).parent.parent / "fixtures" / "inventories" / "bad"
BAD_FILES = sorted(BAD_DIR.glob("*.yaml"))


def expectation(path: Path) -> dict[str, str]:
    header = path.read_text().splitlines()[0]
    assert header.startswith("# expect: "), path
    spec = header.removeprefix("# expect: ")
    found = dict(re.findall(r"(line|field)=(\S+)", spec))
    found["msg"] = spec.split("msg=", 1)[1]
    return found


def test_corpus_is_large_enough():
    assert len(BAD_FILES) >= 20


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_inventory_names_file_line_and_field(path: Path):
    expected = expectation(path)
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    error = caught.value
    text = str(error)
    assert "\n" not in text
    assert error.file == str(path)
    if "line" in expected:
        assert error.line == int(expected["line"]), text
        assert text.startswith(f"{path}:{expected['line']}: ")
    if "field" in expected:
        assert error.field == expected["field"], text
    assert expected["msg"] in text


@pytest.mark.parametrize("path", BAD_FILES[:5] + [BAD_DIR / "literal_api_key.yaml"],
                         ids=lambda p: p.stem)
def test_cli_prints_one_line_and_exits_2(path: Path, cli_runner):
    result = cli_runner.run(["inventory", "check", "-i", path], cwd=Path.cwd(), env=os.environ)
    assert result.returncode == Exit.USAGE
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}")
    assert "Traceback" not in result.stderr


def test_literal_api_key_is_not_echoed():
    path = BAD_DIR / "literal_api_key.yaml"
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(path)], capture_output=True, text=True, timeout=60)
    assert "sk-live-0123456789abcdef" not in result.stderr + result.stdout
