"""JSON that remembers where each value is: objects come back as LocatedObject (a dict
with the line of each key), arrays as LocatedArray (a list with the line of each item), so
a validator can say `file:line: field: message`. Strict: duplicate keys are refused, and
so are NaN/Infinity, nesting deeper than MAX_DEPTH and documents over MAX_CHARS.
"""

from __future__ import annotations

import bisect
import json.decoder
import re
from typing import Any, Callable, Dict, List, Tuple

MAX_CHARS = 1024 * 1024
MAX_DEPTH = 32
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,30})(?:\.[0-9]{1,30})?(?:[eE][-+]?[0-9]{1,4})?")


class JsonError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.message = message
        super().__init__(f"line {line}: {message}")


class LocatedObject(Dict[str, Any]):
    line: int
    key_lines: Dict[str, int]


class LocatedArray(List[Any]):
    line: int
    item_lines: List[int]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos)

    def fail(self, pos: int, message: str) -> JsonError:
        return JsonError(self.line(pos), message)

    def skip(self, pos: int) -> int:
        match = _WS.match(self.text, pos)
        return match.end() if match else pos

    def value(self, pos: int, depth: int) -> Tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise self.fail(pos, f"nested deeper than {MAX_DEPTH}")
        char = self.text[pos:pos + 1]
        if char == "{":
            return self.object(pos, depth)
        if char == "[":
            return self.array(pos, depth)
        if char == '"':
            return self.string(pos)
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, pos):
                return value, pos + len(word)
        number = _NUMBER.match(self.text, pos)
        if number and number.end() > pos:
            literal = number.group(0)
            is_float = any(c in literal for c in ".eE")
            return (float(literal) if is_float else int(literal)), number.end()
        raise self.fail(pos, "expected a value" if char else "unexpected end of the document")

    def string(self, pos: int) -> Tuple[str, int]:
        try:
            return json.decoder.scanstring(self.text, pos + 1, True)  # type: ignore[attr-defined]
        except json.JSONDecodeError as err:
            raise self.fail(err.pos, err.msg) from None

    def members(self, pos: int, close: str, member: Callable[[int], int]) -> int:
        """The members of an object or array, from just after its opening bracket to CLOSE:
        MEMBER(pos) reads one and returns the position after it. Returns the position after
        CLOSE."""
        pos = self.skip(pos)
        if self.text.startswith(close, pos):
            return pos + 1
        while True:
            pos = self.skip(member(pos))
            if self.text.startswith(close, pos):
                return pos + 1
            if not self.text.startswith(",", pos):
                raise self.fail(pos, f"expected ',' or '{close}'")
            pos = self.skip(pos + 1)

    def object(self, pos: int, depth: int) -> Tuple[LocatedObject, int]:
        out = LocatedObject()
        out.line, out.key_lines = self.line(pos), {}

        def member(pos: int) -> int:
            if not self.text.startswith('"', pos):
                raise self.fail(pos, "expected a key in double quotes")
            key_pos = pos
            key, pos = self.string(pos)
            if key in out:
                raise self.fail(key_pos, f"key {key!r} twice")
            pos = self.skip(pos)
            if not self.text.startswith(":", pos):
                raise self.fail(pos, "expected ':' after the key")
            value, pos = self.value(self.skip(pos + 1), depth + 1)
            out[key], out.key_lines[key] = value, self.line(key_pos)
            return pos

        return out, self.members(pos + 1, "}", member)

    def array(self, pos: int, depth: int) -> Tuple[LocatedArray, int]:
        out = LocatedArray()
        out.line, out.item_lines = self.line(pos), []

        def item(pos: int) -> int:
            value, end = self.value(pos, depth + 1)
            out.append(value)
            out.item_lines.append(self.line(pos))
            return end

        return out, self.members(pos + 1, "]", item)

def loads(text: str) -> Any:
    if len(text) > MAX_CHARS:
        raise JsonError(1, f"{len(text)} characters, more than {MAX_CHARS}")
    parser = _Parser(text)
    value, end = parser.value(parser.skip(0), 0)
    end = parser.skip(end)
    if end != len(text):
        raise parser.fail(end, "extra data after the document")
    return value
