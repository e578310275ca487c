"""Version strings of the Ascend stack and the Python stack, normalised for comparison.

Huawei versions mix conventions: `24.1.rc3` / `24.1.RC3`, four or five parts
(`24.1.rc2.2`, `25.3.rc1.b020`, `7.5.0.1.129`), test builds (`7.0.T10`,
`7.6.T13.0.B094`), PEP 440 strings from pip (`2.9.0.post1`, `0.17.0rc1`,
`2.1.0.post8.dev20241009`, `2.9.0+cpu`) and a leading `v` (`v0.17.0rc1`).
A version is split into tokens; each token gets a rank so that
`alpha < beta/T(test) < rc < release < post` and `dev` sorts before what it follows.
Build tags (`b020`, `B094`) identify a build of the same version and are ignored when
ordering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANK_DEV = -1
_RANK_ALPHA = 0
_RANK_BETA = 1
_RANK_RC = 2
_RANK_RELEASE = 3
_RANK_POST = 4

_TAG_RANKS = {
    "dev": _RANK_DEV,
    "a": _RANK_ALPHA, "alpha": _RANK_ALPHA,
    "b": _RANK_BETA, "beta": _RANK_BETA, "t": _RANK_BETA,
    "rc": _RANK_RC, "pre": _RANK_RC, "preview": _RANK_RC,
    "post": _RANK_POST,
}

_TOKEN = re.compile(r"[a-z]+|\d+")


class VersionError(ValueError):
    """The text is not a version string."""


@dataclass(frozen=True, order=False)
class Version:
    """A parsed version. `key` orders versions; `text` is what the tool printed."""

    text: str
    key: tuple[tuple[int, int], ...]
    local: str = ""

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> str:
        return self.text

    def _padded(self, other: "Version") -> tuple[tuple, tuple]:
        n = max(len(self.key), len(other.key))
        pad = (_RANK_RELEASE, 0)
        return (self.key + (pad,) * (n - len(self.key)),
                other.key + (pad,) * (n - len(other.key)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        a, b = self._padded(other)
        return a == b

    def __hash__(self) -> int:
        key = list(self.key)
        while key and key[-1] == (_RANK_RELEASE, 0):
            key.pop()
        return hash(tuple(key))

    def __lt__(self, other: "Version") -> bool:
        a, b = self._padded(other)
        return a < b

    def __le__(self, other: "Version") -> bool:
        return self == other or self < other

    def __gt__(self, other: "Version") -> bool:
        return other < self

    def __ge__(self, other: "Version") -> bool:
        return other <= self

    def startswith(self, prefix: "Version") -> bool:
        """True when this version is in the series `prefix` (`24.1.rc3` is in `24.1`)."""
        return self.key[: len(prefix.key)] == prefix.key

    @property
    def release(self) -> tuple[int, ...]:
        """The leading numeric parts (`24.1.rc3` -> (24, 1))."""
        out: list[int] = []
        for rank, value in self.key:
            if rank != _RANK_RELEASE:
                break
            out.append(value)
        return tuple(out)


def parse_version(text: str) -> Version:
    """Parse any version string seen in the Ascend and Python stacks."""
    raw = text.strip()
    if not raw:
        raise VersionError("empty version")
    body, _, local = raw.partition("+")
    body = body.lower()
    if body.startswith("v") and len(body) > 1 and body[1].isdigit():
        body = body[1:]
    if not body or not body[0].isdigit():
        raise VersionError(f"not a version: {text!r}")
    matches = list(_TOKEN.finditer(body))
    if not matches or "".join(m.group() for m in matches) != re.sub(r"[._\-]", "", body):
        raise VersionError(f"not a version: {text!r}")
    key: list[tuple[int, int]] = []
    i = 0
    while i < len(matches):
        tok = matches[i].group()
        if tok.isdigit():
            key.append((_RANK_RELEASE, int(tok)))
            i += 1
            continue
        has_number = i + 1 < len(matches) and matches[i + 1].group().isdigit()
        number = int(matches[i + 1].group()) if has_number else 0
        dotted = matches[i].start() > 0 and body[matches[i].start() - 1] in "._-"
        if tok == "b" and dotted:
            pass  # a build tag (8.0.0.B100, 25.3.rc1.b020, 7.6.T13.0.B094): same version
        elif tok in _TAG_RANKS:
            key.append((_TAG_RANKS[tok], number))
        else:
            raise VersionError(f"unknown tag {tok!r} in version {text!r}")
        i += 2 if has_number else 1
    return Version(text=raw, key=tuple(key), local=local)


def try_parse_version(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return parse_version(text)
    except VersionError:
        return None


@dataclass(frozen=True)
class VersionRange:
    """`[lo,hi]` from a version file. `hi_is_prefix` for `[24.1,24.1.]` (a whole series)."""

    low: Version
    high: Version
    hi_is_prefix: bool = False

    def contains(self, version: Version) -> bool:
        if self.hi_is_prefix and version.startswith(self.high):
            return True
        if self.hi_is_prefix and version.startswith(self.low) and self.low == self.high:
            return True
        return self.low <= version <= self.high

    def __str__(self) -> str:
        hi = self.high.text + ("." if self.hi_is_prefix else "")
        return f"[{self.low.text},{hi}]"

    def to_json(self) -> str:
        """As the version files write it (`ascendctl facts --json`)."""
        return str(self)


_BRACKET = re.compile(r"\[([^\]]*)\]")


def parse_version_ranges(text: str) -> tuple[VersionRange, ...]:
    """Parse `[7.0.0,7.5.99]`, `[6.4.0,6.4.99],[7.0.0,8.9.9]` or
    `[23.0.0,23.0.0.],[24.0,24.0.]` (prefix ranges with a trailing dot)."""
    ranges: list[VersionRange] = []
    for body in _BRACKET.findall(text):
        parts = [p.strip() for p in body.split(",")]
        if len(parts) == 1:
            parts = parts * 2
        if len(parts) != 2:
            raise VersionError(f"not a version range: [{body}]")
        low_text, high_text = parts
        prefix = high_text.endswith(".")
        ranges.append(VersionRange(parse_version(low_text), parse_version(high_text.rstrip(".")),
                                   hi_is_prefix=prefix))
    if not ranges:
        raise VersionError(f"no version range in {text!r}")
    return tuple(ranges)


# --- Huawei inner version codes (V100R001C19SPC001B124) ---------------------------------

_INNER = re.compile(r"V(\d+)R(\d+)C(\d+)", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class InnerCode:
    """The `VxxxRxxxCxx` part of an Innerversion: what compatibility lists name."""

    v: int
    r: int
    c: int

    def __str__(self) -> str:
        return f"V{self.v:03d}R{self.r:03d}C{self.c:02d}"

    def to_json(self) -> str:
        return str(self)


def parse_inner_code(text: str) -> InnerCode:
    m = _INNER.search(text)
    if not m:
        raise VersionError(f"not an inner version: {text!r}")
    return InnerCode(int(m.group(1)), int(m.group(2)), int(m.group(3)))


@dataclass(frozen=True)
class InnerCodeRange:
    low: InnerCode
    high: InnerCode

    def contains(self, code: InnerCode) -> bool:
        return self.low <= code <= self.high

    def __str__(self) -> str:
        if self.low == self.high:
            return f"[{self.low}]"
        return f"[{self.low},{self.high}]"

    def to_json(self) -> str:
        return str(self)


def parse_inner_code_list(text: str) -> tuple[InnerCodeRange, ...]:
    """Parse `[V100R001C13],[V100R001C15]` and `[V100R001C13,V100R001C19],[V100R001C30]`."""
    out: list[InnerCodeRange] = []
    for body in _BRACKET.findall(text):
        parts = [p.strip() for p in body.split(",") if p.strip()]
        if len(parts) == 1:
            code = parse_inner_code(parts[0])
            out.append(InnerCodeRange(code, code))
        elif len(parts) == 2:
            out.append(InnerCodeRange(parse_inner_code(parts[0]), parse_inner_code(parts[1])))
        else:
            raise VersionError(f"not an inner version range: [{body}]")
    return tuple(out)
