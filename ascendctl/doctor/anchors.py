"""The literal text a regex cannot match without: a cheap `in` test before the regex.

`required_literals(pattern)` returns strings such that every match of the pattern contains
at least one of them (None when no such set of useful length can be proven). The doctor
runs each signature's regex only on lines (and blocks of lines) that contain one of its
literals: `str.__contains__` is a fast C scan, the regexes are not, and most log lines
contain no signature's literal at all.

Derived from the parsed pattern, so it is right by construction: a literal run is only
extended over zero-width items (anchors, lookarounds) and groups that occur exactly once;
an alternation requires one literal of each branch; a repeat with a minimum of at least one
requires its body once. Case-insensitive patterns get no literals.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Optional

if sys.version_info >= (3, 11):
    from re import _parser as sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_parse

MIN_LITERAL = 3
_ZERO_WIDTH = {"AT", "ASSERT", "ASSERT_NOT"}
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}

Requirement = frozenset  # any one of these strings must occur


def required_literals(pattern: re.Pattern) -> Optional[tuple[str, ...]]:
    if pattern.flags & re.IGNORECASE or not isinstance(pattern.pattern, str):
        return None
    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    except re.error:  # pragma: no cover - the pattern compiled already
        return None
    found = _sequence(list(parsed.data))
    if found is None:
        return None
    return tuple(sorted(found))


def _sequence(items: list[tuple[Any, Any]]) -> Optional[Requirement]:
    """The best requirement of a sequence: its longest literal run, or that of a part."""
    candidates: list[Requirement] = []
    run: list[str] = []

    def close() -> None:
        if run:
            candidates.append(Requirement({"".join(run)}))
            run.clear()

    for item in _flatten(items):
        if item is None:                       # something unknown: ends the run
            close()
            continue
        op, av = item
        name = str(op)
        if name == "LITERAL":
            run.append(chr(av))
        elif name in _ZERO_WIDTH:
            continue
        elif name == "BRANCH":
            close()
            branches = [_sequence(list(branch)) for branch in av[1]]
            if all(b is not None for b in branches):
                candidates.append(Requirement().union(*branches))  # type: ignore[arg-type]
        elif name in _REPEATS:
            close()
            low, _high, body = av
            if low >= 1:
                inner = _sequence(list(body))
                if inner is not None:
                    candidates.append(inner)
        else:
            close()
    close()
    useful = [c for c in candidates if c and min(len(s) for s in c) >= MIN_LITERAL]
    if not useful:
        return None
    # the longest literals are the rarest in a log (a common one would send most blocks
    # of a log to the regex); among equals, the fewest (each costs a scan of the text)
    return max(useful, key=lambda c: (min(len(s) for s in c), -len(c)))


def _flatten(items: list[tuple[Any, Any]]) -> list[Optional[tuple[Any, Any]]]:
    """Groups that occur exactly once, inlined: their text is part of the sequence.
    A group that changes flags (case) is unknown (None)."""
    out: list[Optional[tuple[Any, Any]]] = []
    for op, av in items:
        name = str(op)
        if name == "SUBPATTERN":
            _group, add_flags, _del_flags, body = av
            if add_flags & re.IGNORECASE:
                out.append(None)
            else:
                out.extend(_flatten(list(body)))
        elif name == "ATOMIC_GROUP":
            out.extend(_flatten(list(av)))
        else:
            out.append((op, av))
    return out
