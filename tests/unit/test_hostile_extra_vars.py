"""`ascendctl play -e @FILE` reads FILE the bounded way (issue 19): a FIFO, a device, a
directory, a giant, deep nesting, an alias bomb or a file that is no NAME: value mapping
is refused by the real CLI with exit 2 and one line `FILE[:LINE]: message`, quickly,
before any host is contacted (`--list-tasks` contacts nothing either way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendctl.cli.play import _extra_vars
from ascendctl.errors import InputError
from tests.unit.hostile_files import (
    DEMO_PLAYBOOK, GOOD, Cost, cli, fifo, hang_guard, measure_startup, refused,
)


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    return measure_startup(tmp_path_factory.mktemp("startup"))


def play_with(tmp_path: Path, vars_file: Path, *, process: bool = False):
    return cli(tmp_path, "play", DEMO_PLAYBOOK, "-i", GOOD, "--list-tasks",
               "-e", f"@{vars_file}", process=process)


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "vars.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


CASES = {
    "a FIFO": (lambda tmp: fifo(tmp / "vars.yaml"), None, "a FIFO, not a regular file"),
    "a device": (lambda tmp: Path("/dev/zero"), None, "a device, not a regular file"),
    "a directory": (lambda tmp: tmp, None, "a directory, not a regular file"),
    "too large": (lambda tmp: write(tmp, "pad: x\n" + "# padding\n" * 120_000), None,
                  "too large for an extra vars file"),
    "nested deep": (lambda tmp: write(tmp, "a: " + "[" * 200 + "]" * 200 + "\n"), 1,
                    "nested more than 64 levels deep"),
    "an alias bomb": (lambda tmp: write(tmp, alias_bomb()), 5, "alias bomb"),
    "a list": (lambda tmp: write(tmp, "- a\n- b\n"), 1, "must be a mapping of NAME: value"),
    "a bad name": (lambda tmp: write(tmp, "good: 1\n'rm -rf': 2\n"), 2,
                   "extra var name 'rm -rf'"),
    "bad YAML": (lambda tmp: write(tmp, "a: 1\nb: [unclosed\n"), 3, "YAML syntax error"),
    "not UTF-8": (lambda tmp: write(tmp, b"a: \xff\xfe\n"), None, "not UTF-8"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_hostile_extra_vars_file_is_refused(tmp_path, startup, case):
    make, line, phrase = CASES[case]
    path = make(tmp_path)
    prefix = f"error: {path}:{line}: " if line else f"error: {path}: "
    refused(play_with(tmp_path, path), startup, prefix=prefix, phrase=phrase)


def test_the_real_process_refuses_a_fifo(tmp_path):
    """The same through `python -m ascendctl`: the exit code through the interpreter."""
    path = fifo(tmp_path / "vars.yaml")
    refused(play_with(tmp_path, path, process=True), None, prefix=f"error: {path}: ",
            phrase="a FIFO, not a regular file")


def test_a_valid_file_is_read_and_its_values_kept(tmp_path, startup):
    path = write(tmp_path, "demo_state: absent\ndemo_port: 18081\nnested: {a: [1, 2]}\n")
    done, _ = play_with(tmp_path, path)
    assert done.returncode == 0, done.stderr
    assert _extra_vars([f"@{path}", "demo_port=9"]) == {
        "demo_state": "absent", "demo_port": "9", "nested": {"a": [1, 2]}}


def test_the_library_refuses_a_fifo_without_blocking(tmp_path):
    path = fifo(tmp_path / "vars.yaml")
    with hang_guard(), pytest.raises(InputError, match="a FIFO") as caught:
        _extra_vars([f"@{path}"])
    assert caught.value.file == str(path)
