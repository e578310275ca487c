"""The cluster-wide deploy lock, held on the head node (`<root>/deploy.lock/`).

Taking it writes the holder (who, since when, a random token) and a heartbeat file; a
background thread touches the heartbeat every 30 s. A lock whose heartbeat is older
than 15 min is *stale* (its deploy died). `--force-unlock` breaks only a stale lock;
breaking a live one takes a second, explicit consent (`--force-unlock --really`). The
holder learns that it lost the lock from a heartbeat (or the check before the engines
are touched) answering with someone else's token: it then asks the run to stop at the
next step boundary, without rescue (the cluster is the new holder's now).
"""

from __future__ import annotations

import secrets as token_source
import threading
import time
from collections.abc import Callable
from typing import Optional

from ascendctl.deploy.nodeops import ForceUnlock, NodeOps
from ascendctl.deploy.nodestate import LockAnswer, LockHolder
from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit

LOCK_HEARTBEAT_S = 30.0
LOCK_STALE_S = 900.0


class DeployLocked(AscendctlError):
    """Another deploy holds the lock (and we may not break it)."""

    exit_code = Exit.LOCKED

    def __init__(self, message: str, holder: Optional[LockHolder]):
        super().__init__(message)
        self.holder = holder


class LockLost(AscendctlError):
    """This deploy held the lock and someone broke it."""

    exit_code = Exit.LOCKED


class ClusterLock:
    def __init__(self, by: str, inventory: str, *, heartbeat_s: float = LOCK_HEARTBEAT_S,
                 stale_s: float = LOCK_STALE_S):
        self.by = by
        self.inventory = inventory
        self.heartbeat_s = heartbeat_s
        self.stale_s = stale_s
        self.lost: Optional[str] = None            # why, once we learnt we lost it
        self.broke: Optional[LockHolder] = None    # the holder our forced acquire removed
        self.on_lost: Optional[Callable[[str], None]] = None
        self._ops: Optional[NodeOps] = None
        self._holder: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._ops is not None and self.lost is None

    # -- taking it ---------------------------------------------------------------------

    def acquire(self, ops: NodeOps, cluster: str, force: ForceUnlock) -> LockAnswer:
        holder = {"holder": self.by, "token": token_source.token_hex(16),
                  "inventory": self.inventory,
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        answer = ops.lock("acquire", holder, stale_after=self.stale_s, force=force)
        if not answer.acquired:
            raise DeployLocked(refusal(cluster, answer, force, self.stale_s), answer.holder)
        self._ops, self._holder, self.broke = ops, holder, answer.broke
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name="deploy-lock-heartbeat")
        self._thread.start()
        return answer

    # -- keeping it --------------------------------------------------------------------

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.verify()
            except LockLost:
                return
            except AscendctlError:
                pass  # unreachable for a moment; the steps report real failures

    def verify(self) -> None:
        """Raise LockLost unless the head still has our token (one remote call; a no-op
        when no lock was taken, as under --check)."""
        if self.lost is not None:
            raise LockLost(self.lost)
        ops = self._ops
        if ops is None:
            return
        answer = ops.lock("heartbeat", self._holder, stale_after=self.stale_s)
        if not answer.held:
            raise LockLost(self._lose(answer.holder, ops.node))

    def _lose(self, holder: Optional[LockHolder], node: str) -> str:
        with self._lock:
            if self.lost is None:
                who = f"now held by {holder.describe()}" if holder else "removed"
                self.lost = f"the deploy lock on {node} was taken over ({who})"
                if self.on_lost is not None:
                    self.on_lost(self.lost)
            return self.lost

    # -- giving it back ----------------------------------------------------------------

    def release(self) -> str:
        self._stop_beating()
        ops, self._ops = self._ops, None
        if ops is None:
            return "not held"
        answer = ops.lock("release", self._holder, stale_after=self.stale_s)
        if answer.released:
            return "lock released"
        holder = answer.holder.describe() if answer.holder else "nobody"
        return f"not released: the lock is not ours any more (held by {holder})"

    def close(self) -> None:
        """Stop the heartbeat; give the lock back if the run could not (best effort)."""
        self._stop_beating()
        if self._ops is not None and self.lost is None:
            try:
                self.release()
            except AscendctlError:
                pass   # connections closed (Ctrl-C): the lock goes stale on its own

    def _stop_beating(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


def refusal(cluster: str, answer: LockAnswer, force: ForceUnlock, stale_s: float) -> str:
    holder = answer.holder
    age = holder.heartbeat_age_s if holder else 0.0
    who = holder.describe() if holder else "?"
    if answer.stale:
        hint = (f" (stale: no heartbeat for {age:.0f} s; use --force-unlock if that deploy "
                "is gone)")
    elif force is ForceUnlock.STALE:
        hint = (f" (its last heartbeat was {age:.0f} s ago: that deploy is alive. "
                f"--force-unlock breaks only a lock without heartbeat for {stale_s:.0f} s; "
                "add --really to break a live one)")
    else:
        hint = f" (last heartbeat {age:.0f} s ago)"
    return f"cluster {cluster} is locked by {who}{hint}"
