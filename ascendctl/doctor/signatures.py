"""The table of known error signatures (data: ascendctl/doctor/data/signatures.yaml)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ascendctl.doctor.anchors import required_literals
from ascendctl.doctor.durations import SECONDS_PER_UNIT, parse_duration, seconds_value
from ascendctl.errors import InputError
from ascendctl.paths import package_data

TABLE = package_data("ascendctl.doctor") / "data" / "signatures.yaml"
SEVERITIES = ("error", "warning", "info")
SOURCES = ("journal", "plog", "kernel", "npu")
KEYS = {"id", "title", "severity", "sources", "regex", "cause", "fix", "refs", "umbrella",
        "compare", "durations"}
# `host__2`: the same value as `host` from another alternative of the regex (Python's re
# allows a group name once); reported as `host`
ALIAS = re.compile(r"^(?P<name>\w+?)__\d+$")


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    severity: str
    sources: tuple[str, ...]
    pattern: re.Pattern
    cause: str
    fix: str
    refs: tuple[str, ...] = ()
    umbrella: bool = False            # a consequence: the cause is an earlier finding
    compare: Optional[str] = None     # report only when this group's values differ
    durations: tuple[tuple[str, str], ...] = ()   # (group, unit when the text has none)
    anchors: Optional[tuple[str, ...]] = None     # one of these is in every matching line
    utf8_anchors: Optional[tuple[bytes, ...]] = field(default=None, init=False, repr=False,
                                                      compare=False)

    def may_match(self, text: str) -> bool:
        """False when TEXT (a line or a block of lines) cannot hold a match."""
        return self.anchors is None or any(anchor in text for anchor in self.anchors)

    def __post_init__(self) -> None:
        anchors = self.anchors or ()
        ascii_only = self.anchors is not None and all(a.isascii() for a in anchors)
        object.__setattr__(self, "utf8_anchors",
                           tuple(a.encode("ascii") for a in anchors) if ascii_only else None)

    def may_match_utf8(self, data: bytes) -> bool:
        """may_match on undecoded UTF-8 (searching bytes is faster than searching text).
        Exact for ASCII literals: an ASCII byte decodes to itself even next to bytes that
        are not valid UTF-8, and no other byte decodes to ASCII."""
        if self.anchors is None:
            return True
        if self.utf8_anchors is None:
            return self.may_match(data.decode("utf-8", "replace"))
        return any(anchor in data for anchor in self.utf8_anchors)

    def search(self, line: str) -> Optional[re.Match]:
        if not self.may_match(line):
            return None
        return self.pattern.search(line)

    def values(self, match: re.Match) -> dict[str, Any]:
        """The named groups of a match (aliases under their name), and every duration
        group also as `<group>_s`, in seconds."""
        values: dict[str, Any] = {}
        for name, value in match.groupdict().items():
            if value is None:
                continue
            alias = ALIAS.match(name)
            values.setdefault(alias.group("name") if alias else name, value.strip())
        for group, unit in self.durations:
            if group in values:
                try:
                    values[f"{group}_s"] = seconds_value(parse_duration(values[group], unit))
                except ValueError:
                    pass
        return values


def _group_names(pattern: re.Pattern) -> set[str]:
    names = set()
    for name in pattern.groupindex:
        alias = ALIAS.match(name)
        names.add(alias.group("name") if alias else name)
    return names


def _entry(raw: Any, index: int, path: Path) -> Signature:
    where = f"entry {index + 1}"
    if not isinstance(raw, dict):
        raise InputError("each signature must be a mapping", file=str(path), field=where)
    unknown = set(raw) - KEYS
    missing = {"id", "title", "severity", "sources", "regex", "cause", "fix"} - set(raw)
    if unknown or missing:
        raise InputError(f"unknown keys {sorted(unknown)} / missing keys {sorted(missing)}",
                         file=str(path), field=raw.get("id", where))
    if raw["severity"] not in SEVERITIES:
        raise InputError(f"severity must be one of {SEVERITIES}", file=str(path),
                         field=f"{raw['id']}.severity")
    sources = tuple(raw["sources"])
    if not sources or set(sources) - set(SOURCES):
        raise InputError(f"sources must be among {SOURCES}", file=str(path),
                         field=f"{raw['id']}.sources")
    try:
        pattern = re.compile(raw["regex"])
    except re.error as err:
        raise InputError(f"bad regex: {err}", file=str(path),
                         field=f"{raw['id']}.regex") from None
    groups = _group_names(pattern)
    compare = raw.get("compare")
    if compare is not None and compare not in pattern.groupindex:
        raise InputError(f"compare names a group the regex lacks: {compare}", file=str(path),
                         field=f"{raw['id']}.compare")
    durations = raw.get("durations") or {}
    if not isinstance(durations, Mapping):
        raise InputError("durations must map a group to its default unit", file=str(path),
                         field=f"{raw['id']}.durations")
    for group, unit in durations.items():
        if group not in groups:
            raise InputError(f"durations names a group the regex lacks: {group}",
                             file=str(path), field=f"{raw['id']}.durations")
        if unit not in SECONDS_PER_UNIT:
            raise InputError(f"unknown unit {unit!r} (one of ms, s, min, h)", file=str(path),
                             field=f"{raw['id']}.durations.{group}")
    return Signature(id=raw["id"], title=raw["title"], severity=raw["severity"],
                     sources=sources, pattern=pattern, cause=" ".join(raw["cause"].split()),
                     fix=" ".join(raw["fix"].split()), refs=tuple(raw.get("refs") or ()),
                     umbrella=bool(raw.get("umbrella", False)), compare=compare,
                     durations=tuple(durations.items()), anchors=required_literals(pattern))


def load_signatures(path: Path = TABLE) -> tuple[Signature, ...]:
    from ascendctl.inventory.yamlsrc import load_yaml_data

    data = load_yaml_data(path, what="signature table")
    if not isinstance(data, list):
        raise InputError("the signature table must be a list", file=str(path))
    table = tuple(_entry(raw, i, path) for i, raw in enumerate(data))
    ids = [s.id for s in table]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise InputError(f"duplicate ids {duplicates}", file=str(path))
    return table


@lru_cache(maxsize=1)
def default_signatures() -> tuple[Signature, ...]:
    return load_signatures(TABLE)
