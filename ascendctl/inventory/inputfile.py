"""Reading files the operator hands us: regular files only, bounded in size and depth.

A FIFO or a device (`-i /dev/zero`) is refused before it is read (opening a FIFO for
reading blocks until a writer appears, so the file is opened non-blocking and checked
with fstat). JSON nested deeper than a limit is refused instead of raising
RecursionError somewhere later.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError

MAX_INPUT_BYTES = 4 << 20          # inventories, prompt and signature files
MAX_DEPTH = 64                     # nesting of mappings and lists


def read_input_bytes(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                     what: str = "file") -> bytes:
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("file not found", file=where) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not a {what}", file=where) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=where) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = ("a directory" if stat.S_ISDIR(info.st_mode) else
                    "a FIFO" if stat.S_ISFIFO(info.st_mode) else
                    "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                    else "not a regular file")
            raise InputError(f"{kind}, not a regular file: give the {what} itself",
                             file=where)
        if info.st_size > limit:
            raise InputError(f"{info.st_size} bytes is too large for {_article(what)} "
                             f"(limit {limit})", file=where)
        chunks: list[bytes] = []
        total = 0
        while True:
            block = os.read(fd, 1 << 16)
            if not block:
                break
            total += len(block)
            if total > limit:        # grew while we read it
                raise InputError(f"too large for {_article(what)} (limit {limit} bytes)",
                                 file=where)
            chunks.append(block)
        return b"".join(chunks)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=where) from None
    finally:
        os.close(fd)


def read_input_text(path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES,
                    what: str = "file") -> str:
    data = read_input_bytes(path, limit=limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=str(path)) from None


def parse_json(text: str | bytes, *, file: str, what: str = "JSON",
               max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with every failure an InputError: syntax, numbers beyond Python's
    limits, nesting deeper than `max_depth` (checked before parsing, so the parser's
    own recursion is never reached)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{what} is not UTF-8 (byte {err.start})", file=file) from None
    depth = json_depth(text)
    if depth > max_depth:
        raise InputError(f"{what} is nested {depth} levels deep (limit {max_depth})",
                         file=file)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError, OverflowError) as err:
        line = getattr(err, "lineno", None)
        message = getattr(err, "msg", None) or str(err)
        raise InputError(f"{what} is not valid: {message}", file=file, line=line) from None


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
                   what: str = "JSON file", max_depth: int = MAX_DEPTH) -> Any:
    return parse_json(read_input_bytes(Path(path), limit=limit, what=what), file=str(path),
                      what=what, max_depth=max_depth)


def _article(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun
