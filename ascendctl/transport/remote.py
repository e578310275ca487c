"""What a connection to a node can do, as one protocol with two implementations.

    Remote          the protocol every module, node call and deploy step is written against
    RemoteCommands  run / run_shell / run_script / write_file, built on `exec` (shared)
    LocalRemote     this machine, through `sh -c` (tests, and work on the controller)

`ascendctl.transport.connection.HostConnection` is the SSH implementation. Every command
line reaching `exec` was built with ascendctl.transport.quoting, whichever side runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Optional, Protocol, runtime_checkable

from ascendctl.transport import quoting
from ascendctl.transport.errors import ConnectError, ConnectKind
from ascendctl.transport.files import put_file
from ascendctl.transport.results import CommandResult


@runtime_checkable
class Remote(Protocol):
    """One host's command channel: lazily opened, reusable, safe to use from many threads."""

    name: str

    @property
    def is_open(self) -> bool: ...

    @property
    def failure(self) -> Optional[ConnectError]:
        """Why the host could not be reached (it then fails fast), or None."""

    @property
    def exec_count(self) -> int:
        """Executions so far (one per command): tests prove round trips with it."""

    def open(self) -> None:
        """Connect unless connected; raises ConnectError when the host cannot be reached."""

    def reconnect(self) -> None:
        """Forget a failure or a dropped connection and connect again (a rebooted node)."""

    def close(self) -> None: ...

    def exec(self, command: str, *, stdin: bytes | str | None = None,
             timeout: float | None = None) -> CommandResult:
        """Run one already-quoted command line; never raises on a non-zero exit (check
        `result.ok`); raises ConnectError when the host is unreachable or drops."""

    def become_command(self, command: str, become: Optional[bool]) -> str:
        """The command wrapped in `sudo -n` when this host's user needs it (or `become`)."""

    def run(self, argv: Sequence[quoting.Arg], *, stdin: bytes | str | None = None,
            timeout: float | None = None, become: Optional[bool] = None,
            env: Mapping[str, quoting.Arg] | None = None) -> CommandResult: ...

    def run_shell(self, script: str, args: Sequence[quoting.Arg] = (), *,
                  stdin: bytes | str | None = None, timeout: float | None = None,
                  become: Optional[bool] = None, shell: str = "sh") -> CommandResult: ...

    def run_script(self, script: str, args: Sequence[quoting.Arg] = (), *,
                   shell: str = "sh", timeout: float | None = None,
                   become: Optional[bool] = None) -> CommandResult: ...

    def write_file(self, path: str, data: bytes | str, *, mode: int | None = None,
                   owner: str | None = None, group: str | None = None,
                   become: Optional[bool] = None) -> bool: ...


class RemoteCommands:
    """The argv / script / file helpers of a Remote, on top of its `exec` and
    `become_command` (so both implementations quote exactly the same way)."""

    def exec(self, command: str, *, stdin: bytes | str | None = None,
             timeout: float | None = None) -> CommandResult:  # pragma: no cover
        raise NotImplementedError

    def become_command(self, command: str, become: Optional[bool]) -> str:  # pragma: no cover
        raise NotImplementedError

    def open(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def run(self, argv: Sequence[quoting.Arg], *, stdin: bytes | str | None = None,
            timeout: float | None = None, become: Optional[bool] = None,
            env: Mapping[str, quoting.Arg] | None = None) -> CommandResult:
        """Run an argv list: every element reaches the remote side as one literal word."""
        command = quoting.join_argv(quoting.with_env(env, argv))
        self.open()
        return self.exec(self.become_command(command, become), stdin=stdin, timeout=timeout)

    def run_shell(self, script: str, args: Sequence[quoting.Arg] = (), *,
                  stdin: bytes | str | None = None, timeout: float | None = None,
                  become: Optional[bool] = None, shell: str = "sh") -> CommandResult:
        """`sh -c SCRIPT ascendctl ARGS…` with values as "$1", "$2"… (never spliced in)."""
        command = quoting.sh_c(script, args, shell=shell)
        self.open()
        return self.exec(self.become_command(command, become), stdin=stdin, timeout=timeout)

    def run_script(self, script: str, args: Sequence[quoting.Arg] = (), *,
                   shell: str = "sh", timeout: float | None = None,
                   become: Optional[bool] = None) -> CommandResult:
        """Run a whole multi-line script in ONE execution: sent on stdin to `sh -s -- ARGS`.

        The script is wrapped in a function so the shell parses all of it before running
        any of it; its commands read stdin from /dev/null (a `cat` in the script cannot
        swallow the rest of the script).
        """
        wrapped = ("__ascendctl_main() {\n" + script.rstrip("\n") + "\n}\n"
                   '__ascendctl_main "$@" </dev/null\n')
        command = quoting.sh_s(args, shell=shell)
        self.open()
        return self.exec(self.become_command(command, become), stdin=wrapped, timeout=timeout)

    def write_file(self, path: str, data: bytes | str, *, mode: int | None = None,
                   owner: str | None = None, group: str | None = None,
                   become: Optional[bool] = None) -> bool:
        """Write a file atomically (stdin → temp file → mv; no SFTP). True when it changed."""
        return put_file(self, path, data, mode=mode, owner=owner,  # type: ignore[arg-type]
                        group=group, become=become).changed


class LocalRemote(RemoteCommands):
    """This machine as a Remote: each command is `sh -c COMMAND` in its own process group.

    Used by tests (the node-side runtime, playbooks against a temp directory) and for work
    the controller does itself. `become` uses `sudo -n` unless this process is root.
    """

    def __init__(self, name: str = "localhost", *, cancel: threading.Event | None = None,
                 command_timeout: float = 300.0):
        self.name = name
        self._cancel = cancel or threading.Event()
        self._command_timeout = command_timeout
        self._closed = False
        self._count_lock = threading.Lock()
        self._executions = 0

    @property
    def is_open(self) -> bool:
        return not self._closed

    @property
    def failure(self) -> Optional[ConnectError]:
        return None

    @property
    def exec_count(self) -> int:
        return self._executions

    def open(self) -> None:
        if self._closed or self._cancel.is_set():
            raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")

    def reconnect(self) -> None:
        self._closed = False
        self.open()

    def close(self) -> None:
        self._closed = True

    def become_command(self, command: str, become: Optional[bool]) -> str:
        return quoting.become(command, sudo=bool(become) and os.geteuid() != 0)

    def exec(self, command: str, *, stdin: bytes | str | None = None,
             timeout: float | None = None) -> CommandResult:
        self.open()
        timeout = timeout or self._command_timeout
        data = stdin.encode() if isinstance(stdin, str) else stdin
        with self._count_lock:
            self._executions += 1
        started = time.monotonic()
        process = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
        deadline = started + timeout
        pending: Optional[bytes] = data if data is not None else b""
        while True:
            try:
                # Short slices keep an interrupt (the pool's cancel) responsive; a retried
                # communicate() goes on where the previous one stopped.
                out, err = process.communicate(pending, timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pending = None
                if self._cancel.is_set() or self._closed:
                    _kill_group(process)
                    raise ConnectError(self.name, ConnectKind.INTERRUPTED,
                                       "interrupted") from None
                if time.monotonic() >= deadline:
                    _kill_group(process)
                    out, err = process.communicate()
                    return CommandResult(
                        host=self.name, command=command, exit_status=None, stdout_bytes=out,
                        stderr_bytes=err + f"\n[ascendctl: timed out after {timeout:g}s]"
                        .encode(), duration=time.monotonic() - started, timed_out=True)
        return CommandResult(host=self.name, command=command, exit_status=process.returncode,
                             stdout_bytes=out, stderr_bytes=err,
                             duration=time.monotonic() - started)

    def __enter__(self) -> "LocalRemote":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
