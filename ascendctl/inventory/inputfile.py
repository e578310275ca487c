"""Reading files the operator hands us: regular files only, bounded in size and depth.

A FIFO or a device (`-i /dev/zero`) is refused before it is read (opening a FIFO for
reading blocks until a writer appears, so the file is opened non-blocking and checked
with fstat). JSON nested deeper than a limit is refused instead of raising
RecursionError somewhere later, and JSON longer than a limit before it is parsed.
Members of tar archives are read through `ascendctl.inventory.inputtar`, on top of this.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ascendctl.errors import InputError

MAX_INPUT_BYTES = 4 << 20          # inventories, prompt and signature files
MAX_JSON_BYTES = 256 << 20         # the largest JSON read (a weights index)
MAX_DEPTH = 64                     # nesting of mappings and lists
READ_CHUNK = 1 << 16


def shown(value: object, limit: int = 80) -> str:
    """A bounded, printable excerpt of a value for an error message (never a secret)."""
    text = repr(str(value)[:limit])
    return text + ("..." if len(str(value)) > limit else "")


def shown_path(path: object) -> str:
    """A path for an error message, whole (an operator must find the file; the kernel
    bounds a path at 4096 bytes)."""
    return shown(path, limit=4096)


def file_kind(mode: int) -> str:
    """What a file of this st_mode is, for a message: "a FIFO", "a device", ..."""
    return ("a directory" if stat.S_ISDIR(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a regular file" if stat.S_ISREG(mode) else
            "not a regular file")


def non_regular(path: str | os.PathLike[str]) -> str | None:
    """None when PATH is a regular file (symlinks followed), else what it is instead:
    "a FIFO", "a device", "a directory", "a broken symlink", "missing", ..."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symlink" if os.path.islink(path) else "missing"
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return None if stat.S_ISREG(mode) else file_kind(mode)


@contextmanager
def open_input_file(path: str | os.PathLike[str], *, what: str = "file",
                    field: str | None = None, limit: int | None = None) -> Iterator[IO[bytes]]:
    """The regular file PATH opened for binary reading. A FIFO, device, socket or
    directory is refused before anything is read; so is a file larger than LIMIT."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("file not found", file=where, field=field) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not a {what}", file=where, field=field) from None
    except OSError as err:
        try:                         # a socket cannot be opened at all: say what it is
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise InputError(f"{file_kind(mode)}, not a regular file: give the {what} itself",
                             file=where, field=field) from None
        raise InputError(f"cannot read: {err.strerror}", file=where, field=field) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{file_kind(info.st_mode)}, not a regular file: give the {what} "
                             "itself", file=where, field=field)
        if limit is not None and info.st_size > limit:
            raise InputError(f"{info.st_size} bytes is too large for {_article(what)} "
                             f"(limit {limit})", file=where, field=field)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_capped(stream: IO[bytes], limit: int, *, file: str, what: str,
                field: str | None = None) -> bytes:
    """At most LIMIT bytes of STREAM, refusing a longer one (it may grow, or a header may
    understate it) without ever holding more than LIMIT + one chunk."""
    chunks: list[bytes] = []
    total = 0
    while True:
        block = stream.read(min(READ_CHUNK, limit + 1 - total))
        if not block:
            return b"".join(chunks)
        total += len(block)
        if total > limit:
            raise InputError(f"{what} is too large (limit {limit} bytes)", file=file,
                             field=field)
        chunks.append(block)


def read_input_bytes(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                     what: str = "file", field: str | None = None) -> bytes:
    where = str(path)
    with open_input_file(path, what=what, field=field, limit=limit) as handle:
        try:
            return read_capped(handle, limit, file=where, what=_article(what), field=field)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror}", file=where, field=field) from None


def read_input_text(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                    what: str = "file", field: str | None = None) -> str:
    data = read_input_bytes(path, limit=limit, what=what, field=field)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=str(path),
                         field=field) from None


def parse_json(text: str | bytes, *, file: str, what: str = "JSON",
               max_depth: int = MAX_DEPTH, max_bytes: int = MAX_JSON_BYTES,
               field: str | None = None, inside: bool = False) -> Any:
    """json.loads with every failure an InputError: longer than `max_bytes`, syntax,
    numbers beyond Python's limits, nesting deeper than `max_depth` (checked before
    parsing, so the parser's own recursion is never reached). `inside`: the text is a
    member of FILE (an archive), so a line number goes into the message, not FILE:LINE."""
    if len(text) > max_bytes:
        raise InputError(f"{what} is {len(text)} bytes long (limit {max_bytes})", file=file,
                         field=field)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{what} is not UTF-8 (byte {err.start})", file=file,
                             field=field) from None
    depth = json_depth(text)
    if depth > max_depth:
        raise InputError(f"{what} is nested {depth} levels deep (limit {max_depth})",
                         file=file, field=field)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError, OverflowError) as err:
        line = getattr(err, "lineno", None)
        message = (getattr(err, "msg", None) or str(err))[:200]
        if inside and line:
            message, line = f"line {line}: {message}", None
        raise InputError(f"{what} is not valid: {message}", file=file, line=line,
                         field=field) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (linear, no recursion)."""
    import re

    # a string runs to its closing quote or, unterminated, to the end: every match
    # succeeds where it starts, so no position is scanned twice
    strings = r'"(?:[^"\\]+|\\[\s\S])*(?:"|\\?\Z)'
    brackets = re.sub(r"[^\[\]{}]+", "", re.sub(strings, "", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def load_json_file(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                   what: str = "JSON file", max_depth: int = MAX_DEPTH,
                   field: str | None = None) -> Any:
    return parse_json(read_input_bytes(Path(path), limit=limit, what=what, field=field),
                      file=str(path), what=what, max_depth=max_depth, max_bytes=limit,
                      field=field)


def _article(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun
