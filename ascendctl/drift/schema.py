"""What each vllm-ascend release's engine accepts (ascendctl/drift/data/option_schema.json,
written by scripts/extract_option_schema.py from the released sdists) and the removals
and renames its release notes announce (ascendctl/drift/data/option_removals.yaml)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from ascendctl.facts.versions import Version, try_parse_version

KINDS = ("flag", "additional_config", "env")


@dataclass(frozen=True)
class Removal:
    """One option a release note removes, renames or deprecates."""

    kind: str                 # flag | additional_config | env
    name: str
    release: str              # the vllm-ascend release whose notes say so
    replacement: str | None
    note: str                 # "release notes v0.23.0 (vllm_ascend-0.30.0rc2 line 466)"
    text: str                 # the note's words (short)
    still_read: bool = False  # the note says removed, the release's code still reads it


@dataclass(frozen=True)
class ReleaseOptions:
    release: str
    vllm: str
    flags: frozenset[str]
    deprecated_flags: frozenset[str]
    abbrev: bool
    dash_o: bool
    vllm_env: frozenset[str]
    ascend_env: frozenset[str]
    config_keys: frozenset[str]
    config_nested: frozenset[str]
    unknown_config_refused: bool
    unknown_config_source: str

    @property
    def long_flags(self) -> tuple[str, ...]:
        """The `--` option strings, sorted (for prefix look-ups)."""
        return _sorted_long(self.flags)

    @property
    def letter_flags(self) -> tuple[str, ...]:
        """The one-letter short options (`-q`, `-n`): they take an attached value."""
        return _letters(self.flags)


@lru_cache(maxsize=64)
def _sorted_long(flags: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(f for f in flags if f.startswith("--")))


@lru_cache(maxsize=64)
def _letters(flags: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(f for f in flags if len(f) == 2 and f[1] != "-"))


class OptionSchema:
    def __init__(self, data: dict[str, Any], removals: dict[str, Any]):
        self.vllm = data["vllm"]
        self.ascend = data["vllm_ascend"]
        self.releases: list[str] = list(self.ascend["releases"])
        self.vllm_versions: list[str] = list(self.vllm["versions"])
        self.removals = tuple(_removal(entry) for entry in removals["options"])
        self._parsed = {r: try_parse_version(r) for r in self.releases}
        self._options: dict[str, ReleaseOptions] = {}

    def release_of(self, pinned: str) -> str | None:
        """The schema's release equal to a pin (`0.23.0`, `v0.23.0`), or None."""
        wanted = try_parse_version(pinned)
        for release, version in self._parsed.items():
            if version == wanted:
                return release
        return None

    def options(self, release: str) -> ReleaseOptions:
        if release not in self._options:
            self._options[release] = self._build(release)
        return self._options[release]

    def _build(self, release: str) -> ReleaseOptions:
        vllm = self.ascend["vllm"][release]["version"]
        policy = self.ascend["additional_config_policy"][release]
        parser = self.vllm["parser"][vllm]
        return ReleaseOptions(
            release=release, vllm=vllm,
            flags=self._names(self.vllm["flags"], vllm, self.vllm_versions),
            deprecated_flags=self._names(self.vllm["deprecated_flags"], vllm,
                                         self.vllm_versions),
            abbrev=bool(parser["allow_abbrev"]), dash_o=bool(parser["dash_o"]),
            vllm_env=self._names(self.vllm["env"], vllm, self.vllm_versions),
            ascend_env=self._names(self.ascend["env"], release, self.releases),
            config_keys=self._names(self.ascend["additional_config"], release, self.releases),
            config_nested=self._names(self.ascend["additional_config_nested"], release,
                                      self.releases),
            unknown_config_refused=policy["unknown_keys"] == "refused",
            unknown_config_source=policy["source"])

    def _names(self, table: dict[str, str], version: str, order: list[str]) -> frozenset[str]:
        position = {v: i for i, v in enumerate(order)}
        index = position[version]
        return frozenset(name for name, spans in table.items()
                         if _in_spans(spans, index, position))

    def history(self, kind: str, name: str, target: str) -> History:
        """When `name` was accepted around `target`: vLLM versions for flags (target is
        then a vLLM version), vllm-ascend releases for the other kinds."""
        table, order = self._table(kind)
        return _history(table.get(name), order, target)

    def vllm_env_history(self, name: str, vllm: str) -> History:
        return _history(self.vllm["env"].get(name), self.vllm_versions, vllm)

    def _table(self, kind: str) -> tuple[dict[str, str], list[str]]:
        if kind == "flag":
            return self.vllm["flags"], self.vllm_versions
        if kind == "additional_config":
            return self.ascend["additional_config"], self.releases
        return self.ascend["env"], self.releases

    def removal(self, kind: str, name: str, release: str) -> Removal | None:
        """The release-note entry for `name` that applies to `release` (the newest note
        at or before it)."""
        target = self._version(release)
        found = None
        for entry in self.removals:
            if entry.kind == kind and entry.name == name and self._version(entry.release) <= target:
                if found is None or self._version(entry.release) >= self._version(found.release):
                    found = entry
        return found

    def vllm_of(self, release: str) -> str:
        return str(self.ascend["vllm"][release]["version"])

    def releases_with_vllm(self, vllm: str) -> list[str]:
        return [r for r in self.releases if self.ascend["vllm"][r]["version"] == vllm]

    def _version(self, text: str) -> Version:
        parsed = self._parsed.get(text) or try_parse_version(text)
        assert parsed is not None, text
        return parsed

    @property
    def covered(self) -> str:
        return f"{self.releases[0]} to {self.releases[-1]}"


@dataclass(frozen=True)
class History:
    last_before: str | None    # the newest version before the target that accepted it
    removed_in: str | None     # the version after that one
    next_after: str | None     # the oldest version after the target that accepts it


def _history(spans: str | None, order: list[str], target: str) -> History:
    if not spans:
        return History(None, None, None)
    index = order.index(target)
    position = {v: n for n, v in enumerate(order)}
    accepted = [i for i in range(len(order)) if _in_spans(spans, i, position)]
    before = [i for i in accepted if i < index]
    after = [i for i in accepted if i > index]
    last = before[-1] if before else None
    return History(order[last] if last is not None else None,
                   order[last + 1] if last is not None else None,
                   order[after[0]] if after else None)


def _in_spans(spans: str, index: int, position: dict[str, int]) -> bool:
    for span in spans.split(","):
        first, _sep, last = span.partition("..")
        if position[first] <= index <= position[last or first]:
            return True
    return False


def _removal(entry: dict[str, Any]) -> Removal:
    source = entry["source"]
    return Removal(kind=entry["kind"], name=entry["name"], release=str(entry["release"]),
                   replacement=entry.get("replacement"),
                   note=f"release notes v{entry['release']} ({source['sdist']} line "
                        f"{source['line']})",
                   text=source["text"], still_read=bool(entry.get("still_read", False)))


@lru_cache(maxsize=1)
def load_schema() -> OptionSchema:
    data_dir = resources.files("ascendctl.drift") / "data"
    import yaml

    data = json.loads((data_dir / "option_schema.json").read_text(encoding="utf-8"))
    removals = yaml.load((data_dir / "option_removals.yaml").read_text(encoding="utf-8"),
                         Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return OptionSchema(data, removals)
