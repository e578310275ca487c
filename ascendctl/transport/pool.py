"""Connections to many hosts and a bounded parallel executor over them.

    with SshPool(inventory.select("all"), forks=16) as pool:
        results = pool.map(lambda conn: conn.run(["uname", "-r"]))
        for name, res in results.items():      # one result per host, always
            print(name, res.status.value, res.value.stdout if res.ok else res.error)

`HostPool` is the executor over any `Remote`s (`local_pool` gives one over this machine,
for tests); `SshPool` is the HostPool of SSH connections. Every parallel piece of work of a
run goes through one pool, so `--forks` bounds it and Ctrl-C stops it: while `map` waits,
Ctrl-C closes every connection (which unblocks the workers) and KeyboardInterrupt
propagates; results gathered so far stay in `pool.last_results`. A `map` called from one
of the pool's own workers runs its hosts one after another in that worker (a nested map
must not wait for workers that are all busy waiting for it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

from ascendctl.errors import AscendctlError
from ascendctl.transport.connection import HostConnection, JumpHosts, SshConfigSource, SshSettings
from ascendctl.transport.errors import ConnectError, ConnectKind
from ascendctl.transport.remote import LocalRemote, Remote
from ascendctl.transport.results import HostResult, HostStatus

if TYPE_CHECKING:
    from ascendctl.inventory import Host

T = TypeVar("T")
R = TypeVar("R", bound=Remote)
DEFAULT_FORKS = 16
_worker = threading.local()


class HostPool(Generic[R]):
    """One Remote per host, and `map` to run work on many of them in parallel."""

    def __init__(self, remotes: Mapping[str, R], *, forks: int = DEFAULT_FORKS,
                 cancel: threading.Event | None = None):
        if forks < 1:
            raise ValueError("forks must be at least 1")
        self.forks = forks
        self.cancel = cancel or threading.Event()
        self._conns: dict[str, R] = dict(remotes)
        self._executor: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self.last_results: dict[str, HostResult[Any]] = {}

    # -- access --------------------------------------------------------------------------

    @property
    def host_names(self) -> list[str]:
        return list(self._conns)

    def conn(self, name: str) -> R:
        try:
            return self._conns[name]
        except KeyError:
            raise AscendctlError(f"{name}: not a host of this run") from None

    def exec_counts(self) -> dict[str, int]:
        """Remote executions per host so far."""
        return {name: conn.exec_count for name, conn in self._conns.items()}

    # -- parallel execution --------------------------------------------------------------

    def map(self, fn: Callable[[R], T],
            hosts: Sequence[str] | None = None) -> dict[str, HostResult[T]]:
        """Run fn(conn) for each host, at most `forks` at once; one HostResult per host.

        A ConnectError makes that host UNREACHABLE; any other exception makes it FAILED
        with a one-line reason. Results come back in the order the hosts were given.
        """
        names = list(hosts) if hosts is not None else list(self._conns)
        if not names:
            return {}
        if getattr(_worker, "pool", None) is self:
            return {name: self._one(name, fn) for name in names}
        executor = self._get_executor()
        futures: dict[Future[HostResult[T]], str] = {
            executor.submit(self._in_worker, name, fn): name for name in names}
        done_results: dict[str, HostResult[T]] = {}
        self.last_results = done_results
        pending = set(futures)
        try:
            while pending:
                # A timed wait keeps the main thread responsive to Ctrl-C.
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for fut in done:
                    done_results[futures[fut]] = fut.result()
        except KeyboardInterrupt:
            self.interrupt()
            for fut, name in futures.items():
                if name not in done_results:
                    fut.cancel()
            raise
        return {name: done_results[name] for name in names}

    def call(self, name: str, fn: Callable[[R], T]) -> HostResult[T]:
        """fn(conn) for one host in the calling thread, its errors classified like map's
        (for work that itself fans out with `map`, such as a run_once task)."""
        if self.cancel.is_set():
            return HostResult(name, HostStatus.UNREACHABLE, error="interrupted",
                              error_kind=ConnectKind.INTERRUPTED)
        return self._one(name, fn)

    def run(self, argv: Sequence[Any], hosts: Sequence[str] | None = None,
            **kwargs: Any) -> dict[str, HostResult[Any]]:
        """Run one argv on every host; a non-zero exit makes that host FAILED."""
        def one(conn: R) -> Any:
            return conn.run(argv, **kwargs).check()

        return self.map(one, hosts)

    def _in_worker(self, name: str, fn: Callable[[R], T]) -> HostResult[T]:
        _worker.pool = self
        try:
            return self._one(name, fn)
        finally:
            _worker.pool = None

    def _one(self, name: str, fn: Callable[[R], T]) -> HostResult[T]:
        conn = self._conns[name]
        started = time.monotonic()
        try:
            if self.cancel.is_set():
                raise ConnectError(name, ConnectKind.INTERRUPTED, "interrupted")
            value = fn(conn)
            return HostResult(name, HostStatus.OK, value=value,
                              duration=time.monotonic() - started)
        except ConnectError as err:
            return HostResult(name, HostStatus.UNREACHABLE, error=err.reason,
                              error_kind=err.kind, duration=time.monotonic() - started)
        except AscendctlError as err:
            return HostResult(name, HostStatus.FAILED, error=_strip_host(str(err), name),
                              error_kind="failed", duration=time.monotonic() - started)
        except Exception as err:  # noqa: BLE001 - one host's bug must not hide the others
            return HostResult(name, HostStatus.FAILED,
                              error=f"{type(err).__name__}: {err}", error_kind="error",
                              duration=time.monotonic() - started)

    def _get_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(self.forks, max(1, len(self._conns))),
                    thread_name_prefix="ascendctl-ssh")
            return self._executor

    # -- shutdown ------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop: no new connections or commands; close every connection now."""
        self.cancel.set()
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._close_extra()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=not self.cancel.is_set(), cancel_futures=True)

    def _close_extra(self) -> None:
        """What a subclass holds besides the remotes (jump-host connections)."""

    def __enter__(self) -> "HostPool[R]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SshPool(HostPool[HostConnection]):
    """The HostPool of one lazily opened, persistent SSH connection per host."""

    def __init__(self, hosts: Iterable["Host"], *, forks: int = DEFAULT_FORKS,
                 connect_timeout: float | None = None, command_timeout: float | None = None,
                 ssh_config_path: str | None = None, record_commands: bool = False):
        cancel = threading.Event()
        self._ssh_config = SshConfigSource(ssh_config_path)
        self._jumps = JumpHosts(self._ssh_config, cancel)
        self._hosts: dict[str, "Host"] = {}
        conns: dict[str, HostConnection] = {}
        for host in hosts:
            self._hosts[host.name] = host
            settings = SshSettings.for_host(host, connect_timeout=connect_timeout,
                                            command_timeout=command_timeout)
            conns[host.name] = HostConnection(
                settings, ssh_config=self._ssh_config, jumps=self._jumps, cancel=cancel,
                record_commands=record_commands)
        super().__init__(conns, forks=forks, cancel=cancel)

    def _close_extra(self) -> None:
        self._jumps.close()

    def __enter__(self) -> "SshPool":
        return self


def local_pool(names: Iterable[str], *, forks: int = DEFAULT_FORKS,
               command_timeout: float = 300.0) -> HostPool[LocalRemote]:
    """A pool whose every "host" is this machine (commands through `sh -c`)."""
    cancel = threading.Event()
    return HostPool({name: LocalRemote(name, cancel=cancel, command_timeout=command_timeout)
                     for name in names}, forks=forks, cancel=cancel)


def _strip_host(message: str, name: str) -> str:
    prefix = f"{name}: "
    return message[len(prefix):] if message.startswith(prefix) else message
