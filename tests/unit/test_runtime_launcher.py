"""The node-side launcher: binding, signal forwarding, and no orphaned workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendctl.paths import runtime_dir
from ascendctl_runtime.launcher import parse_cpu_list

RUNTIME_PARENT = str(runtime_dir().parent)

# An "engine" that forks a worker (like vLLM's engine core), records both PIDs, ignores
# SIGTERM if asked to, and otherwise runs until stopped.
FAKE_ENGINE = r"""
import os, signal, sys, time
out, ignore_term, exit_code = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
worker = os.fork()
if worker == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a stubborn worker
    while True:
        time.sleep(1)
if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(out, "w") as fh:
    fh.write(f"{os.getpid()} {worker} {sorted(os.sched_getaffinity(0))}")
if exit_code >= 0:
    time.sleep(0.5)
    sys.exit(exit_code)
while True:
    time.sleep(1)
"""


def start_launcher(tmp_path: Path, *, ignore_term=False, exit_code=-1, cpus=None, grace=1.0):
    script = tmp_path / "engine.py"
    script.write_text(FAKE_ENGINE)
    pids_file = tmp_path / "pids"
    config = {"argv": [sys.executable, str(script), str(pids_file), "1" if ignore_term else "0",
                       str(exit_code)],
              "rank": 1, "headless": True, "stop_grace_seconds": grace}
    if cpus:
        config["cpus"] = cpus
    (tmp_path / "engine.json").write_text(json.dumps(config))
    proc = subprocess.Popen([sys.executable, "-m", "ascendctl_runtime.launcher",
                             str(tmp_path / "engine.json")],
                            env={**os.environ, "PYTHONPATH": RUNTIME_PARENT},
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (pids_file.exists() and pids_file.read_text()):
        assert time.monotonic() < deadline, "engine did not start"
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    time.sleep(0.1)
    engine, worker, affinity = pids_file.read_text().split(" ", 2)
    return proc, int(engine), int(worker), affinity


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_sigterm_stops_engine_and_its_workers(tmp_path):
    proc, engine, worker, _ = start_launcher(tmp_path)
    proc.send_signal(signal.SIGTERM)
    # a stop that was asked for is a clean stop for systemd (Result=success): the gang
    # supervisor must tell it from a crash
    assert proc.wait(timeout=10) == 0
    assert wait_gone(engine) and wait_gone(worker)
    assert "stopping rank 1" in proc.stderr.read()


def test_stubborn_engine_is_killed_after_grace(tmp_path):
    proc, engine, worker, _ = start_launcher(tmp_path, ignore_term=True, grace=1.0)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    waited = time.monotonic() - started
    assert code == 0
    assert 0.9 <= waited < 5
    assert wait_gone(engine) and wait_gone(worker)
    assert "grace period over" in proc.stderr.read()


def test_engine_exit_code_is_passed_on_and_workers_reaped(tmp_path):
    proc, engine, worker, _ = start_launcher(tmp_path, exit_code=3)
    assert proc.wait(timeout=10) == 3
    assert wait_gone(worker)


def test_engine_that_exits_on_its_own_with_status_0_is_a_failure(tmp_path):
    proc, _, worker, _ = start_launcher(tmp_path, exit_code=0)
    assert proc.wait(timeout=10) == 1
    assert "exited on its own" in proc.stderr.read()
    assert wait_gone(worker)


def test_engine_killed_without_a_stop_request_reports_the_signal(tmp_path):
    proc, engine, worker, _ = start_launcher(tmp_path)
    os.kill(engine, signal.SIGKILL)
    assert proc.wait(timeout=10) == 128 + signal.SIGKILL
    assert wait_gone(worker)


def test_cpu_binding_applies_to_the_engine(tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    proc, _, _, affinity = start_launcher(tmp_path, cpus=str(cpu))
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert affinity == str([cpu])


def test_bad_config_exits_2(tmp_path):
    (tmp_path / "engine.json").write_text(json.dumps({"argv": "vllm serve"}))
    result = subprocess.run([sys.executable, "-m", "ascendctl_runtime.launcher",
                             str(tmp_path / "engine.json")], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": RUNTIME_PARENT}, timeout=30)
    assert result.returncode == 2
    assert "argv" in result.stderr


@pytest.mark.parametrize("spec,expected", [
    ("0", {0}), ("0-3", {0, 1, 2, 3}), ("0-1,8,10-11", {0, 1, 8, 10, 11}),
])
def test_parse_cpu_list(spec, expected):
    assert parse_cpu_list(spec) == expected


@pytest.mark.parametrize("spec", ["", "3-1", "a"])
def test_parse_cpu_list_rejects(spec):
    with pytest.raises(ValueError):
        parse_cpu_list(spec)
