"""A `vllm serve` command line as the PD rules need it: the flags that matter, each with
the line of the input file it was written on.

Only the flags below are read; any other flag is skipped (a flag's value is never taken
for a flag of ours, since a value follows its flag). Nothing is expanded: `$SERVER_PORT`,
`${DP_SIZE}` stay as written and the reader of each upstream format resolves them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ascendctl.errors import InputError

VALUE_FLAGS = (
    "--port", "--data-parallel-size", "--data-parallel-size-local",
    "--data-parallel-start-rank", "--data-parallel-rank", "--data-parallel-address",
    "--data-parallel-rpc-port", "--tensor-parallel-size", "--speculative-config",
    "--kv-transfer-config", "--additional-config", "--api-server-count",
)
SWITCH_FLAGS = ("--headless", "--no-enable-prefix-caching", "--enable-prefix-caching")
MAX_TOKENS = 2000
PLACEHOLDER = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}?")


@dataclass(frozen=True)
class Token:
    text: str
    line: int | None


@dataclass(frozen=True)
class ServeCommand:
    """Flag → (value, line) for the value flags given, switch → line for the switches."""

    values: dict[str, Token]
    switches: dict[str, int | None]
    # a value flag followed by another flag or by nothing: vLLM's argument parser stops
    missing: dict[str, int | None]

    def value(self, flag: str) -> Token | None:
        return self.values.get(flag)


def placeholder(text: str) -> str | None:
    """The variable name when TEXT is exactly one `$NAME` / `${NAME}`, else None."""
    match = PLACEHOLDER.fullmatch(text.strip())
    return match.group(1) if match else None


def split_command(text: str, *, file: str, line: int | None, field: str) -> list[str]:
    """Shell words of a command written in a YAML string or a shell script (backslash
    continuations joined, nothing expanded)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    try:
        words = shlex.split(joined, comments=False, posix=True)
    except ValueError as err:
        raise InputError(f"cannot split the command into words: {err}", file=file, line=line,
                         field=field) from None
    if len(words) > MAX_TOKENS:
        raise InputError(f"a command of more than {MAX_TOKENS} words", file=file, line=line,
                         field=field)
    return words


def parse_serve(words: Sequence[Token]) -> ServeCommand:
    values: dict[str, Token] = {}
    switches: dict[str, int | None] = {}
    missing: dict[str, int | None] = {}
    index = 0
    while index < len(words):
        word = words[index]
        name, eq, inline = word.text.partition("=")
        if name in VALUE_FLAGS:
            if eq:
                values.setdefault(name, Token(inline, word.line))
            elif index + 1 < len(words) and not words[index + 1].text.startswith("--"):
                values.setdefault(name, words[index + 1])
                index += 1
            else:
                missing.setdefault(name, word.line)
        elif word.text in SWITCH_FLAGS:
            switches.setdefault(word.text, word.line)
        index += 1
    return ServeCommand(values, switches, missing)


def locate_words(words: Sequence[str], lines: Sequence[str], first: int,
                 last: int) -> list[Token]:
    """Each word with the file line it starts on, searching forward from line FIRST to
    LAST (1-based, inclusive): a flag is found on its own line, a value on the line of
    its first characters. A word not found keeps the line of the word before it."""
    tokens: list[Token] = []
    cursor = first
    for word in words:
        probe = word.strip().split("\n", 1)[0].strip()[:40].rstrip()
        found = None
        if probe:
            for number in range(cursor, last + 1):
                if probe in lines[number - 1]:
                    found = number
                    break
        line = found if found is not None else cursor
        tokens.append(Token(word, line))
        cursor = line
    return tokens


def line_of(needle: str, lines: Sequence[str], first: int | None, last: int) -> int | None:
    """The first line from FIRST to LAST holding NEEDLE, else FIRST."""
    if first is None:
        return None
    for number in range(first, min(last, len(lines)) + 1):
        if needle in lines[number - 1]:
            return number
    return first
