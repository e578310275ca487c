"""`doctor explain` is linear in the size of the log: generous bounds on pathological
inputs (a 1 MiB line built to make each signature's regex work at every occurrence of its
literal text; a 100 MB log of normal lines), which a quadratic scan would miss by far."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ascendctl.doctor.explain import explain_log
from ascendctl.doctor.logfile import LogReader
from ascendctl.doctor.signatures import default_signatures

ROOT = Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "tests/fixtures/doctor"
MIB = 1 << 20


def pathological_lines() -> dict[str, bytes]:
    """Per signature: its first real line cut right after its literal text, repeated to
    1 MiB (the regex starts, and fails, at every occurrence), and its literal in the middle
    of a 1 MiB run of a word character (a regex backtracking over the run would show)."""
    public = yaml.safe_load((DOCTOR / "public_lines.yaml").read_text())
    shapes: dict[str, bytes] = {}
    for sig in default_signatures():
        line = public[sig.id]["lines"][0]["line"]
        anchor = next(a for a in sig.anchors or () if a in line)
        piece = line[:line.index(anchor) + len(anchor)].encode()
        shapes[f"{sig.id} repeated"] = (piece * (MIB // len(piece) + 1))[:MIB]
        run = b"a" * (MIB // 2 - len(anchor))
        shapes[f"{sig.id} in a run of a"] = run + anchor.encode() + run
    return shapes


def test_a_mebibyte_line_is_scanned_in_linear_time():
    slowest = (0.0, "")
    for name, line in pathological_lines().items():
        start = time.perf_counter()
        explain_log(LogReader(io.BytesIO(line), name=name), default_signatures())
        slowest = max(slowest, (time.perf_counter() - start, name))
    # measured: 0.2 s typical, 0.5 s for the slowest shape (DS-23) on this 2-core machine
    assert slowest[0] < 10, slowest


def test_a_100_mb_log_is_streamed_in_bounded_memory_and_time(tmp_path):
    lines = (DOCTOR / "lab_engine_journal_node0.log").read_text().splitlines()[1:]
    healthy = lines[:next(i for i, line in enumerate(lines) if "Stopping ascendctl-engine" in line)]
    error = next(line for line in lines if "Address already in use" in line)
    block = ("\n".join(healthy) + "\n").encode()
    log = tmp_path / "100mb.log"
    with open(log, "wb") as handle:
        written = 0
        while written < 100_000_000:
            handle.write(block)
            written += len(block)
        handle.write(error.encode() + b"\n")
    expected_lines = block.count(b"\n") * (written // len(block)) + 1
    # the peak memory of the CLI process alone: measured from a parent of its own
    probe = ("import resource, subprocess, sys, time\n"
             "start = time.perf_counter()\n"
             "done = subprocess.run([sys.executable, '-m', 'ascendctl', 'doctor', 'explain', "
             "sys.argv[1], '--json'], capture_output=True)\n"
             "print(done.returncode, time.perf_counter() - start, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.stdout.write(done.stdout.decode())\n")
    result = subprocess.run([sys.executable, "-c", probe, str(log)], capture_output=True,
                            text=True, timeout=600, cwd=ROOT)
    status, report = result.stdout.split("\n", 1)
    code, seconds, peak_kib = status.split()
    assert int(code) == 1, result.stderr[-2000:]
    explained = json.loads(report)
    assert explained["lines"] == expected_lines and explained["bytes"] == log.stat().st_size
    [finding] = explained["findings"]
    assert finding["id"] == "DS-12" and finding["first_line"] == expected_lines
    # measured: about 4 s and 45 MiB (a whole-file read would need over 200 MiB)
    assert float(seconds) < 180, seconds
    assert int(peak_kib) < 150 * 1024, peak_kib
