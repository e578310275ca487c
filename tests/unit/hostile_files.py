"""Helpers for the hostile-file tests (issue 19): the real CLI (in the module's CLI runner,
or as a child process of its own) with a kill guard, the bound on its time, and the files
an operator might hand over by mistake or malice (FIFOs, devices, sparse giants)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.cli_runner import Hang, Run, module_runner

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "tests" / "fixtures" / "inventories" / "good.yaml"
DEMO_PLAYBOOK = ROOT / "playbooks" / "examples" / "demo.yaml"
# The budget is CPU seconds of a run beyond the CLI's own start-up: the work done,
# whatever else loads the machine. Blocking costs no CPU: the wall clock bounds it.
BUDGET = 2.0
WALL_SLACK = 15.0         # wall seconds beyond start-up: a child that waits on something
HANG_TIMEOUT = 60         # a child still running after this hangs: fail, and it is killed


@dataclass(frozen=True)
class Cost:
    wall: float
    cpu: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli(tmp_path: Path, *args: str | Path, env: dict[str, str] | None = None,
        process: bool = False) -> tuple[subprocess.CompletedProcess | Run, Cost]:
    """`ascendctl ARGS` in tmp_path, HOME and caches there too: through the module's CLI
    runner (tests/unit/cli_runner.py), or with PROCESS as `python -m ascendctl`."""
    environment = {**os.environ, "HOME": str(tmp_path), "TEST_API_KEY": "unit-test-key",
                   "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})}
    if not process:
        try:
            run = module_runner().run(args, cwd=tmp_path, env=environment,
                                      timeout=HANG_TIMEOUT)
        except Hang as hang:
            pytest.fail(str(hang))
        return run, Cost(run.wall, run.cpu)
    started, cpu = time.monotonic(), _children_cpu()
    try:
        done = subprocess.run([sys.executable, "-m", "ascendctl", *map(str, args)],
                              capture_output=True, text=True, env=environment, cwd=tmp_path,
                              stdin=subprocess.DEVNULL, timeout=HANG_TIMEOUT)
    except subprocess.TimeoutExpired:          # subprocess.run has killed the child
        pytest.fail(f"`ascendctl {' '.join(map(str, args))}` still running after "
                    f"{HANG_TIMEOUT}s: it hangs")
    return done, Cost(time.monotonic() - started, _children_cpu() - cpu)


def measure_startup(tmp_path: Path) -> Cost:
    """What a CLI run costs on valid input: the bound's base."""
    costs = []
    for _ in range(2):
        done, cost = cli(tmp_path, "inventory", "check", "-i", GOOD)
        assert done.returncode == 0, done.stderr
        costs.append(cost)
    return Cost(min(c.wall for c in costs), min(c.cpu for c in costs))


def refused(run: tuple[subprocess.CompletedProcess | Run, Cost], startup: Cost | None, *,
            prefix: str, phrase: str) -> str:
    """Exit 2, one short line starting with PREFIX and holding PHRASE, no traceback,
    nothing on stdout, within the budget (unless STARTUP is None: a process run, its
    start-up not measured). Returns the line."""
    done, cost = run
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(prefix), (lines[0], prefix)
    assert phrase in lines[0], (lines[0], phrase)
    assert len(lines[0]) < 600, lines[0]
    assert done.stdout == ""
    if startup is not None:
        assert cost.cpu < startup.cpu + BUDGET, f"{cost} (start-up {startup})"
        assert cost.wall < startup.wall + WALL_SLACK, f"{cost} (start-up {startup})"
    return lines[0]


@contextmanager
def hang_guard(seconds: float = 10.0) -> Iterator[None]:
    """Fail (instead of hanging the run) when the body blocks, e.g. opening a FIFO."""
    def fire(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"still blocked after {seconds}s: hangs")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of SIZE bytes that costs nothing on disk."""
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def deep_json(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


def good_inventory(tmp_path: Path, edit: Any = None, name: str = "inv.yaml") -> Path:
    """tests/fixtures/inventories/good.yaml, edited by EDIT(data, all_vars)."""
    data = yaml.safe_load(GOOD.read_text())
    if edit is not None:
        edit(data, data["all"]["vars"])
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
