"""Regular expressions from prompt sets: checked when the set is loaded, searched with a
deadline when the gate judges the answers.

Python's `re` has no time limit: `^(\\d+)+$` against 26 digits and an `x` backtracks for
seconds, doubling with every digit. A search therefore runs in a child process
(prompt_regex_child.py, one for the whole gate) that is killed when it passes the deadline; the
prompt fails with the reason, the next pattern gets a fresh child, and the gate goes on.
The text searched is bounded too: a longer answer fails its regex without a search.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Optional

MATCH_DEADLINE_S = 1.0
START_TIMEOUT_S = 30.0            # a loaded jump host may take long to start Python
MAX_SEARCHED_CHARS = 1 << 16      # far above a 4096-token answer
MAX_PATTERN_CHARS = 2000
MAX_PATTERN_NESTING = 32
CHILD = Path(__file__).with_name("prompt_regex_child.py")
# what re.compile raises besides re.error: nesting beyond the parser's recursion,
# repeat counts beyond a C long (`a{99999999999}`)
COMPILE_ERRORS = (re.error, RecursionError, OverflowError, MemoryError, ValueError, TypeError)


class MatchUndecided(Exception):
    """The search gave no answer (deadline, answer too long, the child failed): the prompt
    fails with this reason."""


def pattern_problem(pattern: str) -> Optional[str]:
    """Why PATTERN cannot be an expected answer, or None."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a regular expression of {len(pattern)} characters (at most {MAX_PATTERN_CHARS})"
    depth = group_nesting(pattern)
    if depth > MAX_PATTERN_NESTING:
        return f"groups nested {depth} deep (at most {MAX_PATTERN_NESTING})"
    try:
        re.compile(pattern)
    except re.error as err:
        return f"bad regular expression: {err}"
    except COMPILE_ERRORS as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:120]
        return f"bad regular expression: {reason}"
    return None


def group_nesting(pattern: str) -> int:
    """The deepest nesting of groups: parentheses outside character classes, escapes and
    (?#comments)."""
    depth = deepest = 0
    index, end = 0, len(pattern)
    while index < end:
        ch = pattern[index]
        if ch == "\\":
            index += 2
            continue
        if ch == "[":
            index = _class_end(pattern, index + 1)
            continue
        if pattern.startswith("(?#", index):
            close = pattern.find(")", index)
            index = end if close < 0 else close + 1
            continue
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth = max(0, depth - 1)
        index += 1
    return deepest


def _class_end(pattern: str, index: int) -> int:
    """The index after the `]` closing the class whose body starts at INDEX (a `]` first
    in the body, after an optional ^, is a member, as in re)."""
    if pattern.startswith("^", index):
        index += 1
    if pattern.startswith("]", index):
        index += 1
    while index < len(pattern):
        if pattern[index] == "\\":
            index += 2
            continue
        if pattern[index] == "]":
            return index + 1
        index += 1
    return index


class RegexSearcher:
    """re.search in a child process, each search bounded by DEADLINE_S: use it for every
    pattern a user gave. The child starts at the first search; close() (or the with
    block) ends it."""

    def __init__(self, deadline_s: float = MATCH_DEADLINE_S):
        self.deadline_s = deadline_s
        self._child: Optional[subprocess.Popen[bytes]] = None
        self._pending = b""

    def __enter__(self) -> "RegexSearcher":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], value: Optional[BaseException],
                 trace: Optional[TracebackType]) -> None:
        self.close()

    def search(self, pattern: str, text: str) -> bool:
        if len(text) > MAX_SEARCHED_CHARS:
            raise MatchUndecided(f"the answer has {len(text)} characters; a regex is "
                                 f"searched in at most {MAX_SEARCHED_CHARS}")
        child = self._child or self._start()
        request = (json.dumps({"pattern": pattern, "text": text}) + "\n").encode()
        try:
            assert child.stdin is not None
            child.stdin.write(request)
            child.stdin.flush()
            line = self._reply(child, time.monotonic() + self.deadline_s)
        except OSError as err:
            self._stop()
            raise MatchUndecided(f"the regex search failed: {err.strerror or err}") from None
        if line is None:
            self._stop()
            raise MatchUndecided(f"regex did not finish within {self.deadline_s:g} s: "
                                 "catastrophic backtracking?")
        try:
            reply = json.loads(line)
            if "error" in reply:
                raise MatchUndecided(f"the regex search failed: {reply['error']}")
            return bool(reply["matched"])
        except (ValueError, KeyError, TypeError):
            self._stop()
            raise MatchUndecided("the regex search failed: a malformed answer") from None

    def close(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()          # end of input: the child exits
            child.wait(timeout=self.deadline_s)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()
        finally:
            if child.stdout is not None:
                child.stdout.close()

    def _start(self) -> subprocess.Popen[bytes]:
        # -I -S: the standard library only, nothing from the environment or the cwd
        child = subprocess.Popen([sys.executable, "-I", "-S", str(CHILD)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, close_fds=True)
        self._child, self._pending = child, b""
        # the deadline is the search's alone: wait until the child is ready
        try:
            ready = self._reply(child, time.monotonic() + START_TIMEOUT_S)
        except OSError:
            ready = None
        if ready is None:
            self._stop()
            raise MatchUndecided("the regex search process did not start")
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        child.kill()                         # our own child, by its handle
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _reply(self, child: subprocess.Popen[bytes], deadline: float) -> Optional[bytes]:
        """The child's next answer line, or None when the deadline passes first."""
        stdout: IO[bytes] = child.stdout  # type: ignore[assignment]
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                block = os.read(stdout.fileno(), 1 << 16)
                if not block:
                    raise OSError("the regex search process exited")
                self._pending += block
        line, self._pending = self._pending.split(b"\n", 1)
        return line
