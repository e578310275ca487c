"""Bounded tailing of log files (faults/logtail.py) on real files: a partial line waits, a
line longer than a read is passed over, a file far behind skips ahead and says so, and the
state round-trips."""

from __future__ import annotations

from ascendctl_runtime.faults import logtail
from ascendctl_runtime.faults.logtail import LogTail


def test_new_complete_lines_only_and_a_partial_line_waits(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("history\n")
    tail = LogTail([str(tmp_path / "*.log")])
    assert tail.read() == ([], [])
    with log.open("a") as handle:
        handle.write("one\ntw")
    chunks, _ = tail.read()
    assert [c.text for c in chunks] == ["one\n"]
    with log.open("a") as handle:
        handle.write("o\n")
    assert [c.text for c in tail.read()[0]] == ["two\n"]
    again = LogTail([str(tmp_path / "*.log")])
    again.restore(tail.state())
    with log.open("a") as handle:
        handle.write("three\n")
    assert [c.text for c in again.read()[0]] == ["three\n"]


def test_bounded_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(logtail, "MAX_READ_BYTES", 16)
    monkeypatch.setattr(logtail, "MAX_BEHIND_BYTES", 64)
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogTail([str(log)])
    tail.read()
    log.write_text("x" * 40 + "\nshort\n")
    chunks, _ = tail.read()
    assert chunks == []                                   # 16 bytes of one long line: passed over
    texts = [c.text for _ in range(4) for c in tail.read()[0]]
    assert texts[-1].endswith("short\n")
    with log.open("a") as handle:
        handle.write("y\n" * 100)
    chunks, errors = tail.read()
    assert errors and "bytes behind, skipped to its last 16" in errors[0]
    assert len(chunks[0].text) <= 16


def test_a_file_that_went_away_is_forgotten(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("x\n")
    tail = LogTail([str(tmp_path / "*.log")])
    tail.read()
    log.unlink()
    tail.read()
    assert tail.state()["files"] == {}
