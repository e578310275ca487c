"""The table of known error signatures (data: ascendctl/doctor/data/signatures.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ascendctl.errors import InputError
from ascendctl.paths import package_data

TABLE = package_data("ascendctl.doctor") / "data" / "signatures.yaml"
SEVERITIES = ("error", "warning", "info")
SOURCES = ("journal", "plog", "kernel", "npu")
KEYS = {"id", "title", "severity", "sources", "regex", "cause", "fix", "refs", "umbrella",
        "compare"}


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

    def search(self, line: str) -> Optional[re.Match]:
        return self.pattern.search(line)


def _entry(raw: dict, index: int, path: Path) -> Signature:
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
    compare = raw.get("compare")
    if compare is not None and compare not in pattern.groupindex:
        raise InputError(f"compare names a group the regex lacks: {compare}", file=str(path),
                         field=f"{raw['id']}.compare")
    return Signature(id=raw["id"], title=raw["title"], severity=raw["severity"],
                     sources=sources, pattern=pattern, cause=" ".join(raw["cause"].split()),
                     fix=" ".join(raw["fix"].split()), refs=tuple(raw.get("refs") or ()),
                     umbrella=bool(raw.get("umbrella", False)), compare=compare)


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
