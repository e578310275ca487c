"""A bad inventory stops a command before any host is contacted.

The command runs in a child Python with an audit hook (PEP 578) that records every
`socket.connect` the process makes; it observes, it changes nothing. A control run with a
valid inventory pointing at closed loopback ports proves the hook sees connection attempts.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.exitcodes import Exit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "inventories"
BAD_FILES = sorted((FIXTURES / "bad").glob("*.yaml"))
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "demo.yaml"

RUN_WITH_CONNECT_HOOK = r"""
import sys
def hook(event, args):
    if event == "socket.connect":
        sys.stderr.write("CONNECT-ATTEMPT %r\n" % (args[1],))
        sys.stderr.flush()
sys.addaudithook(hook)
sys.argv = ["ascendctl"] + sys.argv[1:]
from ascendctl.cli import main
main()
"""


def run_play(inventory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_WITH_CONNECT_HOOK, "play", str(PLAYBOOK),
                           "-i", str(inventory), "--yes", "--connect-timeout", "2"],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_control_the_hook_sees_connection_attempts(tmp_path):
    port = closed_port()
    text = (FIXTURES / "good.yaml").read_text()
    text = text.replace("198.18.250.11", "127.0.0.1").replace("198.18.250.12", "127.0.0.2")
    text = text.replace("      user: root\n", f"      user: root\n      port: {port}\n")
    good = tmp_path / "good.yaml"
    good.write_text(text)
    result = run_play(good)
    assert result.returncode == Exit.UNREACHABLE, result.stderr[-2000:]
    assert f"CONNECT-ATTEMPT ('127.0.0.1', {port})" in result.stderr


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_inventory_opens_no_connection(path: Path):
    result = run_play(path)
    assert result.returncode == Exit.USAGE, result.stdout + result.stderr
    assert "CONNECT-ATTEMPT" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}")
