"""The state one playbook run shares between its tasks, owned by the runner.

Every module gets it as `ctx.run_state`. It holds:

* typed parts, one instance per type, created on first use:
  `DeployRun.of(ctx)` is `ctx.run_state.part(DeployRun, lambda: DeployRun(ctx.inventory))`
  — a command can also put a part in before the run (`RunState().add(DeployRun(...))`)
  and read it afterwards;
* the run's first failure (`failure`), which rescue plays see as the `failed_task`
  variable;
* a stop request: any part, from any thread (a lock heartbeat), may ask the run to stop at
  the next step boundary (`request_stop`), with or without its rescue plays;
* the batch of serving groups a rolling block works on (`rolling`), None outside one.

Parts may offer `template_vars() -> dict` (variables for the playbook's templates and
conditions) and `close()` (called once when the run ends, whatever happened).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class FailedTask:
    """The first task that failed (or could not reach its host) in a run."""

    play: str
    task: str
    host: str
    msg: str
    where: str          # file:line of the task

    def as_vars(self) -> dict[str, str]:
        return {"play": self.play, "name": self.task, "host": self.host, "msg": self.msg,
                "where": self.where}


@dataclass(frozen=True)
class RollingBatch:
    """The batch of serving groups a rolling block is working on (`ctx.run_state.rolling`,
    and the `rolling` variable of its plays)."""

    block: str
    index: int                      # 1-based
    count: int                      # batches in the rollout
    groups: tuple[str, ...]         # the serving groups of this batch
    hosts: tuple[str, ...]          # their hosts (the plays act on these only)
    waiting: tuple[str, ...] = ()   # groups of later batches (still on what they ran)
    done: tuple[str, ...] = ()      # groups of earlier batches

    def as_vars(self) -> dict[str, Any]:
        return {"block": self.block, "batch": self.index, "batches": self.count,
                "groups": list(self.groups), "hosts": list(self.hosts),
                "waiting": list(self.waiting), "done": list(self.done)}


@dataclass(frozen=True)
class StopRequest:
    reason: str
    rescue: bool        # False: the rescue plays do not run either (only `always` plays)


class RunState:
    def __init__(self) -> None:
        self._parts: dict[type, Any] = {}
        self._lock = threading.RLock()
        self._stop: Optional[StopRequest] = None
        self.failure: Optional[FailedTask] = None
        self.rolling: Optional[RollingBatch] = None     # set while a rolling block runs

    # -- parts -----------------------------------------------------------------------

    def part(self, kind: type[T], make: Callable[[], T]) -> T:
        """The run's instance of `kind`, made by `make` the first time it is asked for."""
        with self._lock:
            value = self._parts.get(kind)
            if value is None:
                value = self._parts[kind] = make()
            return value

    def add(self, value: T) -> T:
        """Put a part in (before the run); replaces one of the same type."""
        with self._lock:
            self._parts[type(value)] = value
            return value

    def find(self, kind: type[T]) -> Optional[T]:
        with self._lock:
            return self._parts.get(kind)

    def template_vars(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            provide = getattr(part, "template_vars", None)
            if provide is not None:
                out.update(provide())
        return out

    def close(self) -> None:
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            close = getattr(part, "close", None)
            if close is not None:
                close()

    # -- failure and stopping ----------------------------------------------------------

    def record_failure(self, failure: FailedTask) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = failure

    def request_stop(self, reason: str, *, rescue: bool = True) -> None:
        """Stop the run before its next task (the first request wins)."""
        with self._lock:
            if self._stop is None:
                self._stop = StopRequest(reason, rescue)

    @property
    def stop_request(self) -> Optional[StopRequest]:
        return self._stop
