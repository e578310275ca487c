"""The deploy lock end to end on a temp root: the controller's ClusterLock talks to the
real release_ops through a LocalRemote (the same bootstrap as over SSH)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from ascendctl.deploy.lock import ClusterLock, DeployLocked, LockLost
from ascendctl.deploy.nodeops import ForceUnlock, NodeOps
from ascendctl.exitcodes import Exit
from ascendctl.transport import LocalRemote


def ops_for(root) -> NodeOps:
    return NodeOps(LocalRemote("node0"), node="node0", root=str(root), python=sys.executable)


def age_heartbeat(root, seconds: float = 2000) -> None:
    old = time.time() - seconds
    os.utime(root / "deploy.lock" / "heartbeat", (old, old))


def test_a_live_lock_is_refused_even_with_force_unlock_and_broken_with_really(tmp_path):
    alice, bob = ClusterLock("alice@jump", "inv.yaml"), ClusterLock("bob@jump", "inv.yaml")
    alice.acquire(ops_for(tmp_path), "c1", ForceUnlock.NO)
    try:
        with pytest.raises(DeployLocked) as plain:
            bob.acquire(ops_for(tmp_path), "c1", ForceUnlock.NO)
        assert plain.value.exit_code == Exit.LOCKED
        assert plain.value.holder.holder == "alice@jump"
        with pytest.raises(DeployLocked, match="that deploy is alive.*--really"):
            bob.acquire(ops_for(tmp_path), "c1", ForceUnlock.STALE)
        alice.verify()                                   # still hers
        answer = bob.acquire(ops_for(tmp_path), "c1", ForceUnlock.ANY)
        assert answer.broke.holder == "alice@jump"
        with pytest.raises(LockLost, match="taken over \\(now held by bob@jump"):
            alice.verify()
        assert "not ours" in alice.release()             # and bob's lock stays
        assert (tmp_path / "deploy.lock").is_dir()
    finally:
        bob.close()
        alice.close()
    assert not (tmp_path / "deploy.lock").exists()


def test_a_stale_lock_is_broken_and_its_holders_heartbeat_notices(tmp_path):
    lost = threading.Event()
    reasons: list[str] = []
    old = ClusterLock("old@jump", "inv.yaml", heartbeat_s=0.2)
    old.on_lost = lambda reason: (reasons.append(reason), lost.set())
    old.acquire(ops_for(tmp_path), "c1", ForceUnlock.NO)
    old._stop_beating()                       # the holder hangs: no more heartbeats
    age_heartbeat(tmp_path)
    new = ClusterLock("new@jump", "inv.yaml")
    with pytest.raises(DeployLocked, match="stale: no heartbeat"):
        new.acquire(ops_for(tmp_path), "c1", ForceUnlock.NO)
    assert new.acquire(ops_for(tmp_path), "c1", ForceUnlock.STALE).broke.holder == "old@jump"
    # The old holder wakes up: its next heartbeat finds someone else's token.
    old._stop.clear()
    old._thread = threading.Thread(target=old._beat, daemon=True)
    old._thread.start()
    assert lost.wait(10)
    assert reasons == ["the deploy lock on node0 was taken over (now held by new@jump since "
                       f"{new._holder['since']})"]
    assert not old.held and new.held
    old.close()
    assert (tmp_path / "deploy.lock").is_dir()       # closing the loser leaves it alone
    assert new.release() == "lock released"


def test_verify_is_a_no_op_without_a_lock_and_close_gives_it_back(tmp_path):
    lock = ClusterLock("me@jump", "inv.yaml")
    lock.verify()                                    # --check: nothing taken
    assert lock.release() == "not held"
    lock.acquire(ops_for(tmp_path), "c1", ForceUnlock.NO)
    assert (tmp_path / "deploy.lock" / "holder.json").exists()
    lock.close()                                     # a run that ended without the always play
    assert not (tmp_path / "deploy.lock").exists()
