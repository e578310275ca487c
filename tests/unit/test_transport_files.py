"""The remote file scripts, run by a real local `sh` (the same text that goes over SSH)."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest

from ascendctl.transport import quoting
from ascendctl.transport.files import FileError, normalize_mode, put_file, read_file
from ascendctl.transport.results import CommandResult


class LocalShell:
    """Runs exactly the command line the SSH transport would send, with local sh."""

    name = "local"

    def __init__(self):
        self.executions = 0

    def run_shell(self, script, args=(), *, stdin=None, become=None, timeout=None):
        self.executions += 1
        command = quoting.sh_c(script, args)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        started = time.monotonic()
        proc = subprocess.run(["sh", "-c", command], input=data, capture_output=True,
                              timeout=30)
        return CommandResult("local", command, proc.returncode, proc.stdout, proc.stderr,
                             time.monotonic() - started)


@pytest.fixture
def conn():
    return LocalShell()


def test_put_file_creates_then_reports_unchanged_in_one_execution_each(conn, tmp_path):
    dest = tmp_path / "a.conf"
    first = put_file(conn, str(dest), "hello\n", mode="0640")
    assert first.changed and not first.existed
    assert dest.read_text() == "hello\n"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    inode = dest.stat().st_ino
    second = put_file(conn, str(dest), "hello\n", mode="0640")
    assert not second.changed
    assert dest.stat().st_ino == inode   # untouched: not even rewritten
    assert conn.executions == 2
    assert [p.name for p in tmp_path.iterdir()] == ["a.conf"]   # no temp files left


def test_put_file_replaces_atomically_and_returns_the_old_content(conn, tmp_path):
    dest = tmp_path / "a.conf"
    dest.write_text("old\n")
    os.chmod(dest, 0o600)
    inode = dest.stat().st_ino
    change = put_file(conn, str(dest), "new\n", want_before=True)
    assert change.content_changed and change.before == b"old\n"
    assert dest.read_text() == "new\n"
    assert dest.stat().st_ino != inode            # a new file renamed over the old one
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600   # mode kept when not given


def test_put_file_mode_only_change_is_applied_in_place(conn, tmp_path):
    dest = tmp_path / "a.conf"
    dest.write_text("same\n")
    os.chmod(dest, 0o644)
    change = put_file(conn, str(dest), "same\n", mode="0600")
    assert change.attrs_changed and not change.content_changed
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600


def test_check_mode_reports_but_writes_nothing(conn, tmp_path):
    dest = tmp_path / "a.conf"
    dest.write_text("old\n")
    before = dest.stat()
    change = put_file(conn, str(dest), "new\n", mode="0600", check=True, want_before=True)
    assert change.content_changed and change.before == b"old\n"
    assert dest.read_text() == "old\n"
    assert dest.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.conf"]
    missing = put_file(conn, str(tmp_path / "nope" / "b"), "x", check=True)
    assert missing.changed and not missing.existed
    assert not (tmp_path / "nope").exists()


def test_hostile_path_is_a_literal_file_name(conn, tmp_path):
    canary = tmp_path / "CANARY"
    dest = tmp_path / "x$(touch CANARY) `touch CANARY`; touch CANARY 'q\"'"
    put_file(conn, str(dest), "data")
    assert dest.read_text() == "data"
    assert not canary.exists()
    assert read_file(conn, str(dest)) == b"data"
    assert read_file(conn, str(tmp_path / "missing")) is None


def test_errors_are_clear(conn, tmp_path):
    with pytest.raises(FileError, match="parent directory .* does not exist"):
        put_file(conn, str(tmp_path / "no" / "such" / "f"), "x")
    with pytest.raises(FileError, match="is a directory"):
        put_file(conn, str(tmp_path), "x")
    with pytest.raises(FileError, match="must be absolute"):
        put_file(conn, "relative/path", "x")
    with pytest.raises(FileError, match="invalid owner"):
        put_file(conn, str(tmp_path / "f"), "x", owner="root; rm -rf /")


@pytest.mark.parametrize("given,expected", [("0644", "644"), ("644", "644"), ("4755", "4755"),
                                            (0o600, "600"), (None, ""), ("", "")])
def test_normalize_mode(given, expected):
    assert normalize_mode(given) == expected


@pytest.mark.parametrize("bad", ["0999", "rwx", "12", "07777x", True])
def test_normalize_mode_rejects(bad):
    with pytest.raises(FileError):
        normalize_mode(bad)
