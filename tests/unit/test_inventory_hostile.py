"""The hostile-inventory corpus (issue 13): every file is refused with exit 2 and one line
`file:line: field: message`, no traceback, nothing executed and nothing contacted.

Each file runs `ascendctl play` (which would connect to every host and run commands) in the
module's CLI runner (tests/unit/cli_runner.py), a child Python with an audit hook (PEP 578)
that reports every `socket.connect` and every process start; the working directory is a
fresh one where a value that reached a shell would create the file CANARY. One file also
runs as `python -m ascendctl` of its own. The corpus is written by
tests/fixtures/hostile/make_corpus.py.
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
from tests.unit.cli_runner import CliRunner, Run

CORPUS = Path(__file__).parent.parent / "fixtures" / "hostile"
ALL_FILES = sorted(CORPUS.glob("*.yaml"))
ACCEPTED = [p for p in ALL_FILES if p.read_bytes().startswith(b"# expect: accept\n")]
FILES = [p for p in ALL_FILES if p not in ACCEPTED]
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "demo.yaml"
# every literal secret value the corpus holds: none may appear in any output
SECRET_VALUES = ("sk-live-0123456789abcdef", "hunter2", "abcdefgh123", "pa55word",
                 "abcdefghijklmnop", "abc123", "abcdef12", "1234567890", "abcdef123456",
                 "hf_abcdefghijklmnopqrstuvwxyz0123456789")

ENV = {**os.environ, "TEST_API_KEY": "unit-test-key"}


def expectation(path: Path) -> dict[str, str]:
    header = path.read_bytes().split(b"\n", 1)[0].decode()
    assert header.startswith("# expect: "), path
    found = dict(re.findall(r"(line|field)=(\S+)", header))
    found["msg"] = header.split("msg=", 1)[1]
    return found


def play_args(inventory: Path) -> list[str]:
    return ["play", str(PLAYBOOK), "-i", str(inventory), "--yes", "--connect-timeout", "2"]


@pytest.fixture(scope="module")
def runs(cli_runner: CliRunner, tmp_path_factory) -> dict[Path, tuple[Run, Path]]:
    """Every corpus file through the CLI, each in its own directory."""
    found = {}
    for path in FILES:
        cwd = tmp_path_factory.mktemp(path.stem)
        found[path] = (cli_runner.run(play_args(path), cwd=cwd, env=ENV, timeout=30), cwd)
    return found


def test_corpus_covers_every_class():
    assert len(FILES) >= 80
    prefixes = {path.stem.split("_", 1)[0] for path in FILES}
    assert prefixes >= {"inject", "newline", "yaml", "nonsense", "canary", "secret"}


def test_the_hook_sees_process_starts_and_connects(cli_runner, tmp_path):
    """Control: the audit hook reports a process start or a connect when one happens."""
    probe = ("import socket, subprocess; subprocess.run(['true'])\n"
             "with socket.socket() as s: s.connect_ex(('127.0.0.1', 9))")
    events = cli_runner.run_code(probe, cwd=tmp_path, env=ENV).events
    assert events[0].startswith("subprocess.Popen") and events[-1].startswith("socket.connect")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_refused_in_one_line_nothing_run(path: Path, runs):
    result, cwd = runs[path]
    assert result.events == (), result.events
    assert_refused(path, result, cwd)


def assert_refused(path: Path, result: Run | subprocess.CompletedProcess, cwd: Path) -> None:
    expected = expectation(path)
    output = result.stdout + result.stderr
    assert result.returncode == Exit.USAGE, output
    assert "Traceback" not in output
    assert not (cwd / "CANARY").exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    prefix = f"error: {path}:{expected['line']}: "
    if "field" in expected:
        prefix += f"{expected['field']}: "
    assert lines[0].startswith(prefix), lines[0]
    assert expected["msg"] in lines[0]
    assert not any(secret in output for secret in SECRET_VALUES)


def test_a_real_process_refuses_it_the_same(tmp_path):
    """`python -m ascendctl`: the exit code and the line through the interpreter."""
    path = next(p for p in FILES if p.stem.startswith("inject"))
    result = subprocess.run([sys.executable, "-m", "ascendctl", *play_args(path)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, env=ENV)
    assert_refused(path, result, tmp_path)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_library_error_names_file_line_field(path: Path):
    expected = expectation(path)
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    error = caught.value
    assert error.file == str(path) and error.line == int(expected["line"])
    assert error.field == expected.get("field")
    assert "\n" not in str(error)


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_legitimate_values_are_accepted(path: Path, tmp_path: Path, cli_runner):
    result = cli_runner.run(["inventory", "check", "-i", path], cwd=tmp_path, env=ENV,
                            timeout=30)
    assert result.returncode == Exit.OK, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.events == (), result.events
    assert not (tmp_path / "CANARY").exists()


def check(runner: CliRunner, path: Path, tmp_path: Path) -> str:
    result = runner.run(["inventory", "check", "-i", path], cwd=tmp_path, env=os.environ,
                        timeout=30)
    return one_line_refusal(path, result)


def one_line_refusal(path: Path, result: Run | subprocess.CompletedProcess) -> str:
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    return lines[0]


def test_fifo_is_refused_without_reading(tmp_path, cli_runner):
    fifo = tmp_path / "inventory.yaml"
    os.mkfifo(fifo)
    assert "a FIFO, not a regular file" in check(cli_runner, fifo, tmp_path)


def test_device_is_refused_without_reading(tmp_path, cli_runner):
    assert "a device, not a regular file" in check(cli_runner, Path("/dev/zero"), tmp_path)


def test_directory_is_refused(tmp_path, cli_runner):
    assert "directory" in check(cli_runner, tmp_path, tmp_path)


def test_oversized_file_is_refused(tmp_path, cli_runner):
    big = tmp_path / "inventory.yaml"
    big.write_text("all:\n  vars:\n    custom:\n" + "      # padding\n" * 100_000)
    assert "too large for a inventory" not in check(cli_runner, big, tmp_path)
    assert "too large for an inventory" in check(cli_runner, big, tmp_path)


def test_invalid_utf8_is_refused(tmp_path, cli_runner):
    bad = tmp_path / "inventory.yaml"
    bad.write_bytes(b"all:\n  vars: {cluster: {name: \xff\xfe}}\n")
    assert "not UTF-8" in check(cli_runner, bad, tmp_path)


def test_a_real_process_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "inventory.yaml"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(fifo)], capture_output=True, text=True, timeout=30,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert "a FIFO, not a regular file" in one_line_refusal(fifo, result)
