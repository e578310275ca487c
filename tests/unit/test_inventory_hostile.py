"""The hostile-inventory corpus (issue 13): every file is refused with exit 2 and one line
`file:line: field: message`, no traceback, nothing executed and nothing contacted.

Each file runs `ascendctl play` (which would connect to every host and run commands) in a
child Python with an audit hook (PEP 578) that reports every `socket.connect` and every
process start; the working directory is a fresh one where a value that reached a shell
would create the file CANARY. The corpus is written by tests/fixtures/hostile/make_corpus.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.load import load_inventory

CORPUS = Path(__file__).parent.parent / "fixtures" / "hostile"
ALL_FILES = sorted(CORPUS.glob("*.yaml"))
ACCEPTED = [p for p in ALL_FILES if p.read_bytes().startswith(b"# expect: accept\n")]
FILES = [p for p in ALL_FILES if p not in ACCEPTED]
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "demo.yaml"
# every literal secret value the corpus holds: none may appear in any output
SECRET_VALUES = ("sk-live-0123456789abcdef", "hunter2", "abcdefgh123", "pa55word",
                 "abcdefghijklmnop", "abc123", "abcdef12", "1234567890", "abcdef123456",
                 "hf_abcdefghijklmnopqrstuvwxyz0123456789")

RUN_WITH_HOOKS = r"""
import sys
WATCHED = ("socket.connect", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
           "os.spawn", "os.fork", "pty.spawn")
def hook(event, args):
    if event in WATCHED:
        sys.stderr.write("AUDIT %s %r\n" % (event, args[:2]))
        sys.stderr.flush()
sys.addaudithook(hook)
sys.argv = ["ascendctl"] + sys.argv[1:]
from ascendctl.cli import main
main()
"""


def expectation(path: Path) -> dict[str, str]:
    header = path.read_bytes().split(b"\n", 1)[0].decode()
    assert header.startswith("# expect: "), path
    found = dict(re.findall(r"(line|field)=(\S+)", header))
    found["msg"] = header.split("msg=", 1)[1]
    return found


def run_play(inventory: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_WITH_HOOKS, "play", str(PLAYBOOK), "-i",
                           str(inventory), "--yes", "--connect-timeout", "2"],
                          capture_output=True, text=True, timeout=30, cwd=cwd,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "TEST_API_KEY": "unit-test-key"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[Path, tuple[subprocess.CompletedProcess, Path]]:
    """Every corpus file through the CLI, four at a time, each in its own directory."""
    def one(path: Path):
        cwd = tmp_path_factory.mktemp(path.stem)
        return path, (run_play(path, cwd), cwd)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, FILES))


def test_corpus_covers_every_class():
    assert len(FILES) >= 80
    prefixes = {path.stem.split("_", 1)[0] for path in FILES}
    assert prefixes >= {"inject", "newline", "yaml", "nonsense", "canary", "secret"}


def test_the_hook_sees_process_starts(tmp_path):
    """Control: the audit hook reports a process start when one happens."""
    probe = RUN_WITH_HOOKS.replace("from ascendctl.cli import main\nmain()",
                                   "import subprocess; subprocess.run(['true'])")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=30)
    assert "AUDIT subprocess.Popen" in result.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_refused_in_one_line_nothing_run(path: Path, runs):
    result, cwd = runs[path]
    expected = expectation(path)
    output = result.stdout + result.stderr
    assert result.returncode == Exit.USAGE, output
    assert "Traceback" not in output
    assert "AUDIT" not in output, output
    assert not (cwd / "CANARY").exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    prefix = f"error: {path}:{expected['line']}: "
    if "field" in expected:
        prefix += f"{expected['field']}: "
    assert lines[0].startswith(prefix), lines[0]
    assert expected["msg"] in lines[0]
    assert not any(secret in output for secret in SECRET_VALUES)


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
def test_legitimate_values_are_accepted(path: Path, tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(path)], capture_output=True, text=True, timeout=30,
                            cwd=tmp_path, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TEST_API_KEY": "unit-test-key"})
    assert result.returncode == Exit.OK, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "CANARY").exists()


def check(path: Path, tmp_path: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(path)], capture_output=True, text=True, timeout=30,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    return lines[0]


def test_fifo_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "inventory.yaml"
    os.mkfifo(fifo)
    assert "a FIFO, not a regular file" in check(fifo, tmp_path)


def test_device_is_refused_without_reading(tmp_path):
    assert "a device, not a regular file" in check(Path("/dev/zero"), tmp_path)


def test_directory_is_refused(tmp_path):
    assert "directory" in check(tmp_path, tmp_path)


def test_oversized_file_is_refused(tmp_path):
    big = tmp_path / "inventory.yaml"
    big.write_text("all:\n  vars:\n    custom:\n" + "      # padding\n" * 100_000)
    assert "too large for a inventory" not in check(big, tmp_path)
    assert "too large for an inventory" in check(big, tmp_path)


def test_invalid_utf8_is_refused(tmp_path):
    bad = tmp_path / "inventory.yaml"
    bad.write_bytes(b"all:\n  vars: {cluster: {name: \xff\xfe}}\n")
    assert "not UTF-8" in check(bad, tmp_path)
