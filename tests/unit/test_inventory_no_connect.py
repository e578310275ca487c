"""A bad inventory stops a command before any host is contacted.

The command runs in the module's CLI runner (tests/unit/cli_runner.py), a child Python with
an audit hook (PEP 578) that records every `socket.connect` the process makes; it observes,
it changes nothing. A control run with a valid inventory pointing at closed loopback ports
proves the hook sees connection attempts. One bad file also runs as `python -m ascendctl`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.exitcodes import Exit
from tests.unit.cli_runner import CliRunner, Run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "inventories"
BAD_FILES = sorted((FIXTURES / "bad").glob("*.yaml"))
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "demo.yaml"

def play_args(inventory: Path) -> list[str]:
    return ["play", str(PLAYBOOK), "-i", str(inventory), "--yes", "--connect-timeout", "2"]


def run_play(runner: CliRunner, inventory: Path) -> Run:
    return runner.run(play_args(inventory), cwd=Path.cwd(), env=os.environ, timeout=120)


def connects(run: Run) -> list[str]:
    return [event for event in run.events if event.startswith("socket.connect ")]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_control_the_hook_sees_connection_attempts(tmp_path, cli_runner):
    port = closed_port()
    text = (FIXTURES / "good.yaml").read_text()
    text = text.replace("198.18.250.11", "127.0.0.1").replace("198.18.250.12", "127.0.0.2")
    text = text.replace("      user: root\n", f"      user: root\n      port: {port}\n")
    good = tmp_path / "good.yaml"
    good.write_text(text)
    result = run_play(cli_runner, good)
    assert result.returncode == Exit.UNREACHABLE, result.stderr[-2000:]
    assert any(event.endswith(f"('127.0.0.1', {port}))") for event in connects(result)), \
        result.events


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_inventory_opens_no_connection(path: Path, cli_runner):
    result = run_play(cli_runner, path)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert connects(result) == []
    assert_one_line(path, result)


def test_a_real_process_refuses_it_the_same():
    """`python -m ascendctl`: the exit code and the line through the interpreter."""
    path = BAD_FILES[0]
    result = subprocess.run([sys.executable, "-m", "ascendctl", *play_args(path)],
                            capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert_one_line(path, result)


def assert_one_line(path: Path, result: Run | subprocess.CompletedProcess) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), result.stderr
