"""The deploy's hold on the supervisor, set and lifted on the head by one shipped call each
(runtime/ascendctl_runtime/hold_node.py), run here through the node-call bootstrap."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin
from ascendctl_runtime import healthstore, layout
from ascendctl_runtime.contract import Hold


def start(op: str, **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-I", "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(call_stdin("hold_node", {"op": op, "kwargs": kwargs}))
    proc.stdin.close()
    proc.stdin = None           # sent: communicate() only reads
    return proc


def answer(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out.decode().strip().splitlines()[-1])


def test_the_hold_is_written_on_the_node_clock_and_read_by_the_supervisors_code(tmp_path):
    before = time.time()
    written = answer(start("hold", root=str(tmp_path), seconds=600, by="root@jump",
                           reason="deploy switching the engines"))["hold"]
    hold = healthstore.read_hold(str(tmp_path))
    assert hold is not None and Hold.from_dict(written) == hold
    assert before + 600 <= hold.until <= time.time() + 600
    assert (hold.by, hold.reason) == ("root@jump", "deploy switching the engines")
    assert Hold.load(str(tmp_path / layout.HOLD_FILE)) == hold


def test_release_removes_the_hold_and_says_when_nobody_acknowledged(tmp_path):
    healthstore.write_hold(str(tmp_path), 600, "x", "y")
    result = answer(start("release", root=str(tmp_path), wait_s=0.6))
    assert result == {"removed": True, "acknowledged": False}
    assert healthstore.read_hold(str(tmp_path)) is None
    assert answer(start("release", root=str(tmp_path), wait_s=0)) == \
        {"removed": False, "acknowledged": False}


def test_release_waits_for_the_supervisor_to_publish_that_it_is_no_longer_held(tmp_path):
    healthstore.write_hold(str(tmp_path), 600, "x", "y")
    state = Path(healthstore.health_path(str(tmp_path), layout.SUPERVISOR_STATE))
    healthstore.write_json(str(state), {"held": {"until": 1.0}})    # an old state
    proc = start("release", root=str(tmp_path), wait_s=30)
    deadline = time.monotonic() + 30
    while (tmp_path / layout.HOLD_FILE).exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.1)
    healthstore.write_json(str(state), {"held": {"until": 1.0}})    # a tick still held
    time.sleep(0.7)
    assert proc.poll() is None
    healthstore.write_json(str(state), {"held": None})              # the next tick
    assert answer(proc) == {"removed": True, "acknowledged": True}

