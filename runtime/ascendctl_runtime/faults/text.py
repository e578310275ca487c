"""Bounded access to a tool's text output, shared by the fault parsers.

A parser gets at most MAX_TEXT_CHARS and lines of at most MAX_LINE_CHARS; anything larger
is refused with a FaultParseError before a regex sees it, so no input can make a parse slow.
"""

from __future__ import annotations

from typing import List, Tuple

MAX_TEXT_CHARS = 256 * 1024
MAX_LINE_CHARS = 4096
MAX_INT_DIGITS = 20          # a 64-bit counter has at most 20 digits


class FaultParseError(ValueError):
    """The output is not what the parser knows; the message says what and where."""

    def __init__(self, what: str, message: str, line: int = 0) -> None:
        self.what = what
        self.line = line
        where = f"{what} line {line}" if line else what
        super().__init__(f"{where}: {message}")


def bounded_lines(text: str, what: str) -> List[str]:
    if not isinstance(text, str):
        raise FaultParseError(what, f"expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise FaultParseError(what, f"output of {len(text)} characters, more than {MAX_TEXT_CHARS}")
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            raise FaultParseError(what, f"line of {len(line)} characters, more than {MAX_LINE_CHARS}", number)
    return lines


def parse_count(value: str, what: str, key: str, line: int = 0) -> int:
    """A non-negative decimal counter as npu-smi and hccn_tool print them (%u, %llu)."""
    value = value.strip()
    if not value.isdigit() or not value.isascii() or len(value) > MAX_INT_DIGITS:
        raise FaultParseError(what, f"{key}: {value[:40]!r} is not a count", line)
    return int(value)


def key_value_lines(lines: List[str]) -> List[Tuple[int, str, str]]:
    """(line number, key, value) of npu-smi's `\\t%-30s : %s` lines (also 40 wide, or
    rendered with spaces); a line whose key is blank continues the previous value (the
    `Error Information` of `-t health`). Blank lines come back as (n, "", "") so callers
    can split sections."""
    out: List[Tuple[int, str, str]] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            out.append((number, "", ""))
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            continue
        out.append((number, key.strip(), value.strip()))
    return out
