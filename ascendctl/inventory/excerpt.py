"""A short, one-line excerpt of a value for an error message.

An error message shows at most EXCERPT_CHARS characters of a bad value: a 1 MB string
must not become a 1 MB error line, and `repr` of an integer of more than 4300 digits
raises ValueError (Python's int-to-str limit) instead of printing it. Containers are
described, never printed (they may hold either).
"""

from __future__ import annotations

import math
from typing import Any

EXCERPT_CHARS = 40
ELLIPSIS = "…"
# more bits than this and the integer is described by its size (10**40 needs 133 bits)
_MAX_PRINTED_BITS = 133


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """`value` as repr would show it, cut to `limit` characters of the value plus "…"."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > _MAX_PRINTED_BITS:
            digits = int(value.bit_length() * math.log10(2)) + 1
            return f"an integer of about {digits} digits"
        return _cut(str(value), limit)
    if isinstance(value, float):
        return _cut(repr(value), limit)
    if isinstance(value, (str, bytes)):
        shown = repr(value[:limit])
        if len(value) > limit:
            shown = shown[:-1] + ELLIPSIS + shown[-1]
        return shown
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key{'' if len(value) == 1 else 's'}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    return f"a {type(value).__name__}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def bounded(message: str, limit: int = 500) -> str:
    """A whole message cut to `limit` characters (a safety net for messages that embed
    values from validators this module does not format)."""
    return _cut(message, limit)
