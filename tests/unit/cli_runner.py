"""The real CLI, many runs in one child interpreter (the corpus tests run hundreds).

A fresh `python -m ascendctl` costs a second or two of start-up and imports per run; here
one child Python starts once, installs an audit hook (PEP 578) and imports the CLI, then
runs `ascendctl.cli.main()` for each request: its own argv, working directory and
environment, stdin /dev/null, file descriptors 1 and 2 redirected to files of their own
(so whatever writes there is captured, as with a pipe), the warnings registry reset, and
SystemExit turned into an exit code as the interpreter does. Each result carries the exit
code, stdout, stderr, the audit events of the run (process starts, socket connects; with
those the import of the CLI caused, as a process of its own would show them) and the
run's CPU time (the child's own and its children's). A run still going after its timeout
is reported as a hang and the child is killed; the next run starts a new one. A run that
kills the child (os._exit, a crash) gives the child's exit status, as a process would.

The tests that must see the real process path (`python -m ascendctl`, the exit code
through the interpreter) keep a few plain subprocess runs beside this.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


# What the tests watch for: a process started, a host contacted.
WATCHED = ("socket.connect", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
           "os.spawn", "os.fork", "pty.spawn")

CHILD = r"""
import json, os, resource, sys, traceback, warnings

WATCHED = tuple(json.loads(sys.argv[3]))
events = []              # a list while the CLI is imported or a run is on: what it caused

def hook(event, args):
    if events is not None and event in WATCHED:
        events.append("%s %r" % (event, args[:2]))

sys.addaudithook(hook)
requests = os.fdopen(int(sys.argv[1]), "r")
replies = os.fdopen(int(sys.argv[2]), "w")
import ascendctl.cli
ascendctl.cli._register_commands()
ascendctl.cli._register_commands = lambda: None     # main() registers: once is enough
startup, events = events, None          # what importing the CLI caused: part of every run

def cpu():
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

def exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1

quiet, own_stderr = os.open(os.devnull, os.O_WRONLY), os.dup(2)
for line in requests:
    request = json.loads(line)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["ascendctl", *request["args"]]
    limit = sys.getrecursionlimit()
    fds = []
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    started = cpu()
    events = []
    try:
        with warnings.catch_warnings():
            if "code" in request:
                exec(request["code"], {"__name__": "__control__"})
            else:
                ascendctl.cli.main()
        code = 0
    except SystemExit as exit:
        code = exit_code(exit.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        seen, events = startup + events, None
        sys.stdout.flush()
        sys.stderr.flush()
    used = cpu() - started
    os.dup2(quiet, 1)
    os.dup2(own_stderr, 2)
    sys.setrecursionlimit(limit)
    replies.write(json.dumps({"code": code, "events": seen, "cpu": used}) + "\n")
    replies.flush()
"""


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    events: tuple[str, ...]        # the audit events of WATCHED the run caused (or: died)
    cpu: float                     # CPU seconds of the run (no start-up)
    wall: float


class Hang(Exception):
    pass


class CliRunner:
    """`run(args, cwd=..., env=...)`: one CLI run in the shared child."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.child: subprocess.Popen | None = None
        self.count = 0

    def _start(self) -> None:
        to_child, self._requests = os.pipe()
        self._replies, from_child = os.pipe()
        self.child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(to_child), str(from_child), json.dumps(WATCHED)],
            pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=open(self.scratch / "runner.log", "ab"))
        os.close(to_child)
        os.close(from_child)
        self._reader = os.fdopen(self._replies, "r")
        self._writer = os.fdopen(self._requests, "w")

    def close(self) -> None:
        if self.child is None:
            return
        self._writer.close()
        try:
            self.child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self._reader.close()
        self.child = None

    def _kill(self) -> int:
        assert self.child is not None
        self.child.kill()
        code = self.child.wait()
        self._writer.close()
        self._reader.close()
        self.child = None
        return code

    def run(self, args: list[str | Path] | tuple[str | Path, ...], *, cwd: Path,
            env: Mapping[str, str], timeout: float = 60) -> Run:
        """ARGS through the CLI; raises Hang when the run takes longer than TIMEOUT."""
        return self._request({"args": [str(arg) for arg in args]}, cwd, env, timeout)

    def run_code(self, code: str, *, cwd: Path, env: Mapping[str, str]) -> Run:
        """CODE (Python) in place of the CLI: for controls of what the hook sees."""
        return self._request({"args": [], "code": code}, cwd, env, 60)

    def _request(self, request: dict, cwd: Path, env: Mapping[str, str],
                 timeout: float) -> Run:
        if self.child is None:
            self._start()
        self.count += 1
        out, err = (self.scratch / f"{self.count}.{name}" for name in ("stdout", "stderr"))
        request.update({"cwd": str(cwd), "env": dict(env), "stdout": str(out),
                        "stderr": str(err)})
        started = time.monotonic()
        try:
            self._writer.write(json.dumps(request) + "\n")
            self._writer.flush()
        except BrokenPipeError:
            pass                                          # read below: the child is gone
        ready, _, _ = select.select([self._reader], [], [], timeout)
        if not ready:
            self._kill()
            raise Hang(f"`ascendctl {' '.join(request['args'])}` still running after "
                       f"{timeout}s: it hangs")
        line = self._reader.readline()
        wall = time.monotonic() - started
        if line:
            reply = json.loads(line)
            code, events, cpu = reply["code"], tuple(reply["events"]), reply["cpu"]
        else:                                             # the run ended the child
            code, events, cpu = self._kill(), ("the child died",), float("nan")
        return Run(code, read_text(out), read_text(err), events, cpu, wall)


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    path.unlink()
    return data.decode()


def module_runner() -> CliRunner:
    """The current test module's runner, for helpers that have no fixture at hand (the
    module-scoped `cli_runner` fixture of tests/unit/conftest.py registers it)."""
    assert _current is not None, "no CLI runner: tests/unit/conftest.py registers one"
    return _current


@contextmanager
def registered_runner(scratch: Path) -> Iterator[CliRunner]:
    """A runner for one test module, what module_runner() returns until it is closed."""
    global _current
    runner = _current = CliRunner(scratch)
    try:
        yield runner
    finally:
        runner.close()
        _current = None


_current: CliRunner | None = None
