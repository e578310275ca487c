"""The release-set matrix (data/release_sets.yaml): which vLLM, CANN, torch, torch_npu,
Triton-Ascend, HDK and Python each vllm-ascend release was validated with, what its images
ship, the models it claims and its tutorials' flags, each cell with its source. Lookups,
the nearest set to a mix of versions, and the check the inventory loader runs on
`versions:`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ascendctl.facts.versions import Version, VersionError, parse_version, try_parse_version
from ascendctl.paths import package_data

SCHEMA = 2
# The inventory's `versions:` fields a release set pins (driver is compared with the
# set's HDK; firmware is the driver's business, see preflight).
COMPONENTS = ("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "python", "driver")
# Pinning one of these names an NPU stack: without them the inventory describes a stack
# without vllm-ascend (the lab's vLLM CPU build) and no release set applies.
ASCEND_ONLY = ("vllm_ascend", "torch_npu")
# The cells every row sources (torch_npu_builds too where a row has builds).
CELLS = ("date", "vllm", "cann", "torch", "torch_npu", "triton_ascend", "mooncake", "nnal",
         "python", "image_python", "hdk", "images", "scope", "tutorials")
# Cells that may be null (then listed in `unverified:` with a note).
NULLABLE = ("triton_ascend", "mooncake", "nnal", "image_python", "hdk")
# What an image stack may override (a null override: the images' value is not stated).
STACK_KEYS = ("cann", "torch_npu", "triton_ascend")
_PRERELEASE = re.compile(r"(a|b|rc|\.dev)\d+")    # PEP 440 pre-releases (rc1, a2, .dev3)


class MatrixError(ValueError):
    """The shipped matrix is malformed (a packaging bug, not bad input)."""


@dataclass(frozen=True)
class Hdk:
    version: str | None
    unverified: bool
    note: str = ""


@dataclass(frozen=True)
class TorchNpuBuild:
    python: str            # minor version, "3.11"
    arch: str              # aarch64 | x86_64
    version: str           # with its local label, 2.9.0.post1+gitee7ba04


@dataclass(frozen=True)
class ImageStack:
    """What official images ship where it differs from the set: for some variants (all
    when empty), or since a date (images of the release branch rebuilt later)."""
    overrides: Mapping[str, str | None]     # STACK_KEYS present; None: not stated
    sources: tuple[str, ...]
    since: str | None = None
    variants: tuple[str, ...] = ()
    note: str = ""

    def describe(self) -> str:
        where = (f"{', '.join(self.variants)} images" if self.variants else "images") + \
            (f" from {self.since}" if self.since else "")
        values = ", ".join(f"{k} {v if v is not None else 'not stated'}"
                           for k, v in self.overrides.items())
        return f"{where}: {values}"


@dataclass(frozen=True)
class ScopeModel:
    name: str
    match: tuple[str, ...]          # normalised fragments of a model's identity
    hardware: tuple[str, ...]       # product lines: a2, a3, 310p, a5


@dataclass(frozen=True)
class Scope:
    restricted: bool | None          # None: the release published no notes
    models: tuple[ScopeModel, ...] = ()
    note: str = ""

    def describe(self) -> str:
        if self.restricted is None:
            return "not stated (no release notes)"
        if not self.restricted:
            return "no restriction stated"
        return "; ".join(f"{m.name} ({', '.join(m.hardware)})" for m in self.models)


@dataclass(frozen=True)
class TutorialFlags:
    """What a release's tutorial command adds to an inventory's own flags."""
    name: str
    args: tuple[str, ...]
    speculative_config: Mapping[str, Any]
    differs: str = ""

    def describe(self) -> str:
        parts = list(self.args) + [f'"{k}": {str(v).lower() if isinstance(v, bool) else v}'
                                   " in --speculative-config"
                                   for k, v in self.speculative_config.items()]
        return " ".join(parts)


@dataclass(frozen=True)
class ReleaseSet:
    vllm_ascend: str
    date: str
    vllm: str
    cann: str
    torch: str
    torch_npu: str
    triton_ascend: str | None
    mooncake: str | None
    nnal: str | None
    python: tuple[str, str]          # inclusive minor versions
    image_python: str | None
    hdk: Hdk
    image_variants: tuple[str, ...]
    sources: Mapping[str, tuple[str, ...]]          # cell -> source ids
    torch_npu_builds: tuple[TorchNpuBuild, ...] = ()
    image_stacks: tuple[ImageStack, ...] = ()
    scope: Scope = Scope(False)
    tutorials: Mapping[str, TutorialFlags] = field(default_factory=dict)   # model -> flags
    unverified: frozenset[str] = frozenset()
    notes: Mapping[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"v{self.vllm_ascend}"

    @property
    def prerelease(self) -> bool:
        return bool(_PRERELEASE.search(self.vllm_ascend))

    @property
    def images_unverified(self) -> bool:
        return "images" in self.unverified

    def image_tags(self, variants: Mapping[str, str]) -> dict[str, str]:
        return {v: f"{self.tag}{variants[v]}" for v in self.image_variants}

    def python_ok(self, version: Version) -> bool:
        low, high = (parse_version(p).release[:2] for p in self.python)
        return low <= version.release[:2] <= high

    @property
    def python_text(self) -> str:
        return f"{self.python[0]}-{self.python[1]}"

    def value(self, component: str) -> str | None:
        if component == "python":
            return self.python_text
        if component == "driver":
            return self.hdk.version
        return getattr(self, component)

    def cells(self, variants: Mapping[str, str], repository: str
              ) -> list[tuple[str, str, tuple[str, ...]]]:
        """(cell, value as text, source ids) in CELLS order, builds after torch_npu."""
        text: dict[str, str] = {
            "date": self.date, "vllm": self.vllm, "cann": self.cann, "torch": self.torch,
            "torch_npu": self.torch_npu, "triton_ascend": self.triton_ascend or "-",
            "mooncake": self.mooncake or "-", "nnal": self.nnal or "-",
            "python": self.python_text, "image_python": self.image_python or "-",
            "hdk": self.hdk.version or "-",
            "images": ", ".join(f"{repository}:{t}"
                                for t in self.image_tags(variants).values()),
            "scope": self.scope.describe(),
            "tutorials": "; ".join(f"{model}: {flags.describe()}"
                                   for model, flags in self.tutorials.items()) or "-",
        }
        out = []
        for cell in CELLS:
            out.append((cell, text[cell], self.sources[cell]))
            if cell == "torch_npu" and self.torch_npu_builds:
                out.append(("torch_npu_builds", ", ".join(
                    f"{b.version} (Python {b.python} {b.arch})" for b in self.torch_npu_builds),
                    self.sources["torch_npu_builds"]))
        return out

    def to_dict(self, variants: Mapping[str, str], repository: str,
                describe_source: Callable[[str], str] | None = None) -> dict[str, Any]:
        def sourced(ids: tuple[str, ...]) -> list[dict[str, str]]:
            return [{"id": i, "document": describe_source(i) if describe_source else i}
                    for i in ids]

        return {
            "vllm_ascend": self.vllm_ascend, "tag": self.tag, "date": self.date,
            "prerelease": self.prerelease, "vllm": self.vllm, "cann": self.cann,
            "torch": self.torch, "torch_npu": self.torch_npu,
            "torch_npu_builds": [{"python": b.python, "arch": b.arch, "version": b.version}
                                 for b in self.torch_npu_builds],
            "triton_ascend": self.triton_ascend, "mooncake": self.mooncake,
            "nnal": self.nnal, "python": list(self.python), "image_python": self.image_python,
            "hdk": {"version": self.hdk.version, "unverified": self.hdk.unverified,
                    "note": self.hdk.note},
            "images": {v: f"{repository}:{t}" for v, t in self.image_tags(variants).items()},
            "images_unverified": self.images_unverified,
            "image_stacks": [{**dict(s.overrides), "since": s.since,
                              "variants": list(s.variants), "note": s.note,
                              "sources": sourced(s.sources)} for s in self.image_stacks],
            "scope": {"restricted": self.scope.restricted, "note": self.scope.note,
                      "models": [{"name": m.name, "hardware": list(m.hardware)}
                                 for m in self.scope.models]},
            "tutorials": {model: {"flags": flags.name, "args": list(flags.args),
                                  "speculative_config": dict(flags.speculative_config),
                                  "differs": flags.differs}
                          for model, flags in self.tutorials.items()},
            "unverified": sorted(self.unverified),
            "notes": dict(self.notes),
            "sources": {cell: sourced(ids) for cell, ids in self.sources.items()},
        }


@dataclass(frozen=True)
class ReleaseMatrix:
    image_repository: str
    image_variants: dict[str, str]       # variant -> tag suffix
    releases: tuple[ReleaseSet, ...]     # oldest first
    documents: Mapping[str, str] = field(default_factory=dict)
    references: Mapping[str, str] = field(default_factory=dict)

    def find(self, vllm_ascend: str) -> ReleaseSet | None:
        wanted = try_parse_version(vllm_ascend)
        for row in self.releases:
            if wanted is not None and parse_version(row.vllm_ascend) == wanted:
                return row
        return None

    @property
    def newest(self) -> ReleaseSet:
        return max(self.releases, key=lambda r: parse_version(r.vllm_ascend))

    def known(self) -> str:
        return ", ".join(r.tag for r in self.releases)

    def describe_source(self, source: str) -> str:
        """The document a source id names: `policy@0.30.0rc2`, `dockerfile@tag:v0.18.0`,
        or a reference id."""
        if source in self.references:
            return self.references[source]
        kind, _, where = source.partition("@")
        if where.startswith("tag:"):
            return f"vllm-ascend {self.documents[kind]} at git tag {where[4:]}"
        return f"vllm-ascend {self.documents[kind]} (PyPI sdist vllm_ascend-{where}.tar.gz)"


def _text(value: Any) -> str:
    return str(value)


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _ids(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in (value if isinstance(value, list) else [value]) if v)


def _check_source(source: str, documents: Mapping[str, str], references: Mapping[str, str],
                  versions: set[Version]) -> None:
    if source in references:
        return
    kind, at, where = source.partition("@")
    if not at or kind not in documents:
        raise MatrixError(f"release_sets.yaml: unknown source {source!r}")
    if where.startswith("tag:v"):
        parse_version(where[5:])
    elif parse_version(where) not in versions:
        raise MatrixError(f"release_sets.yaml: source {source!r} names no sdist of the matrix")


def _stack(raw: dict[str, Any]) -> ImageStack:
    unknown = set(raw) - {*STACK_KEYS, "since", "variants", "source", "note"}
    if unknown or not raw.get("source"):
        raise MatrixError(f"release_sets.yaml: bad image stack {raw!r}")
    return ImageStack(overrides={k: _optional(raw[k]) for k in STACK_KEYS if k in raw},
                      sources=_ids(raw["source"]), since=_optional(raw.get("since")),
                      variants=tuple(str(v) for v in raw.get("variants") or ()),
                      note=str(raw.get("note") or ""))


def _scope(raw: Any) -> Scope:
    models = tuple(ScopeModel(str(m["name"]), tuple(str(x).lower() for x in m["match"]),
                              tuple(str(h) for h in m["hardware"]))
                   for m in raw.get("models") or ())
    restricted = raw.get("restricted")
    if restricted is True and not models or restricted is not True and models:
        raise MatrixError(f"release_sets.yaml: scope {raw!r}: models go with restricted: true")
    return Scope(None if restricted is None else bool(restricted), models,
                 str(raw.get("note") or ""))


def _tutorial_flags(data: Any) -> dict[str, TutorialFlags]:
    out = {}
    for name, raw in (data or {}).items():
        out[str(name)] = TutorialFlags(str(name), tuple(str(a) for a in raw.get("args") or ()),
                                       dict(raw.get("speculative_config") or {}),
                                       str(raw.get("differs") or ""))
    return out


def _row(raw: dict[str, Any], flags: Mapping[str, TutorialFlags]) -> ReleaseSet:
    notes = {str(k): str(v) for k, v in (raw.get("notes") or {}).items()}
    unverified = frozenset(str(c) for c in raw.get("unverified") or ())
    hdk_version = _optional(raw.get("hdk"))
    tutorials = {}
    for model, name in (raw.get("tutorials") or {}).items():
        if name not in flags:
            raise MatrixError(f"release_sets.yaml: v{raw['vllm_ascend']}: unknown tutorial "
                              f"flags {name!r}")
        tutorials[str(model).lower()] = flags[name]
    return ReleaseSet(
        vllm_ascend=_text(raw["vllm_ascend"]), date=_text(raw["date"]),
        vllm=_text(raw["vllm"]), cann=_text(raw["cann"]), torch=_text(raw["torch"]),
        torch_npu=_text(raw["torch_npu"]),
        triton_ascend=_optional(raw.get("triton_ascend")),
        mooncake=_optional(raw.get("mooncake")), nnal=_optional(raw.get("nnal")),
        python=(str(raw["python"][0]), str(raw["python"][1])),
        image_python=_optional(raw.get("image_python")),
        hdk=Hdk(hdk_version, "hdk" in unverified, notes.get("hdk", "")),
        image_variants=tuple(str(v) for v in raw.get("image_variants") or ()),
        sources={str(k): _ids(v) for k, v in (raw.get("sources") or {}).items()},
        torch_npu_builds=tuple(TorchNpuBuild(str(b["python"]), str(b["arch"]),
                                             str(b["version"]))
                               for b in raw.get("torch_npu_builds") or ()),
        image_stacks=tuple(_stack(s) for s in raw.get("image_stacks") or ()),
        scope=_scope(raw["scope"]), tutorials=tutorials, unverified=unverified, notes=notes,
    )


def _check_row(row: ReleaseSet, variants: Mapping[str, str]) -> None:
    for text in (row.vllm_ascend, row.vllm, row.cann, row.torch, row.torch_npu, *row.python,
                 *(b.version for b in row.torch_npu_builds)):
        parse_version(text)
    wanted = set(CELLS) | ({"torch_npu_builds"} if row.torch_npu_builds else set())
    if set(row.sources) != wanted:
        raise MatrixError(f"release_sets.yaml: {row.tag}: sources for "
                          f"{sorted(wanted - set(row.sources))} missing, "
                          f"{sorted(set(row.sources) - wanted)} unknown")
    if not all(row.sources.values()):
        raise MatrixError(f"release_sets.yaml: {row.tag}: a cell with no source")
    nulls = {c for c in NULLABLE if row.value(c if c != "hdk" else "driver") is None}
    if not nulls <= row.unverified or not row.unverified <= set(wanted):
        raise MatrixError(f"release_sets.yaml: {row.tag}: null cells {sorted(nulls)} must be "
                          f"unverified, unverified {sorted(row.unverified)} must be cells")
    if any(cell not in row.notes for cell in row.unverified):
        raise MatrixError(f"release_sets.yaml: {row.tag}: every unverified cell needs a note")
    used = set(row.image_variants) | {v for s in row.image_stacks for v in s.variants}
    unknown = sorted(used - set(variants))
    if unknown:
        raise MatrixError(f"release_sets.yaml: {row.tag}: unknown variants {unknown}")


def parse_matrix(data: Any) -> ReleaseMatrix:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MatrixError(f"release_sets.yaml: schema must be {SCHEMA}")
    variants = {str(k): str(v) for k, v in (data.get("image_variants") or {}).items()}
    documents = {str(k): str(v) for k, v in (data.get("documents") or {}).items()}
    references = {str(k): str(v) for k, v in (data.get("references") or {}).items()}
    flags = _tutorial_flags(data.get("tutorial_flags"))
    rows = []
    for raw in data.get("releases") or []:
        try:
            row = _row(raw, flags)
            _check_row(row, variants)
        except (KeyError, TypeError, IndexError, AttributeError, VersionError) as err:
            raise MatrixError(f"release_sets.yaml: bad row {raw!r}: {err}") from None
        rows.append(row)
    rows.sort(key=lambda r: parse_version(r.vllm_ascend))
    versions = {parse_version(r.vllm_ascend) for r in rows}
    for row in rows:
        for source in (*(i for ids in row.sources.values() for i in ids),
                       *(i for s in row.image_stacks for i in s.sources)):
            try:
                _check_source(source, documents, references, versions)
            except VersionError:
                raise MatrixError(f"release_sets.yaml: {row.tag}: bad source {source!r}"
                                  ) from None
    return ReleaseMatrix(str(data.get("image_repository", "")), variants, tuple(rows),
                         documents, references)


@lru_cache(maxsize=1)
def load_matrix() -> ReleaseMatrix:
    import yaml

    path = package_data("ascendctl.releases") / "data" / "release_sets.yaml"
    # every inventory load reads the matrix: libyaml reads it about 5x faster
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_matrix(yaml.load(path.read_text(encoding="utf-8"), Loader=loader))


# -- matching a `versions:` mix --------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    component: str
    pinned: str
    expected: str | None       # what the set has (None: the set does not state it)
    reason: str

    def describe(self) -> str:
        return f"{self.component} {self.pinned} ({self.reason})"


def _pin_matches(pinned: str, expected: str) -> bool:
    """`8.5` pins 8.5.x (fewer numbers); `2.9.0` does not pin 2.9.0.post1 (a different
    build in a release set). A local label (`+git4c901a4`) on the set's side is ignored."""
    have, want = try_parse_version(pinned), try_parse_version(expected)
    if have is None or want is None:
        return pinned.strip().lower() == expected.strip().lower()
    if want == have:
        return True
    plain = all(ch.isdigit() or ch == "." for ch in pinned.strip().lstrip("vV"))
    return plain and len(have.release) < len(want.release) and \
        want.release[:len(have.release)] == have.release


_UNSTATED = object()     # an image stack's value no source states: compared with nothing


def _expected(row: ReleaseSet, stack: ImageStack | None, component: str) -> Any:
    if stack is not None and component in stack.overrides:
        value = stack.overrides[component]
        return _UNSTATED if value is None else value
    return row.value(component) or ""


def _build_problem(row: ReleaseSet, pinned: str, python: str | None) -> str | None:
    """A torch_npu pin with a local label (`+gitee7ba04`) must be one of the row's builds
    (of the pinned Python, when pinned)."""
    label = pinned.partition("+")[2].lower()
    if not label or not row.torch_npu_builds:
        return None
    minor = try_parse_version(python) if python else None
    builds = [b for b in row.torch_npu_builds
              if minor is None or parse_version(b.python).release[:2] == minor.release[:2]]
    if any(b.version.partition("+")[2].lower() == label for b in builds):
        return None
    listed = ", ".join(f"{b.version} (Python {b.python} {b.arch})" for b in builds) or "none"
    return f"the set's builds{f' for Python {python}' if python else ''}: {listed}"


def differences(row: ReleaseSet, pins: Mapping[str, str],
                stack: ImageStack | None = None) -> list[Difference]:
    """The pinned components that do not fit ROW (or what one of its image stacks
    ships), in COMPONENTS order."""
    out: list[Difference] = []
    for component in COMPONENTS:
        pinned = pins.get(component)
        if not pinned:
            continue
        if component == "python":
            version = try_parse_version(pinned)
            if version is None or not row.python_ok(version):
                out.append(Difference(component, pinned, row.python_text,
                                      f"the set supports Python {row.python_text}"))
        elif component == "driver":
            have, want = try_parse_version(pinned), try_parse_version(row.hdk.version)
            if row.hdk.unverified:
                continue        # a value no source states refuses nothing
            if have is not None and want is not None and have < want:
                out.append(Difference(component, pinned, row.hdk.version,
                                      f"older than the set's HDK {row.hdk.version}"))
        else:
            expected = _expected(row, stack, component)
            if expected is _UNSTATED:
                continue
            if not _pin_matches(pinned, expected):
                out.append(Difference(component, pinned, expected,
                                      f"the set has {expected}"))
            elif component == "torch_npu":
                problem = _build_problem(row, pinned, pins.get("python"))
                if problem:
                    out.append(Difference(component, pinned, expected, problem))
    return out


def closest_differences(row: ReleaseSet, pins: Mapping[str, str]) -> list[Difference]:
    """The differences from the set itself or from what one of its images ships,
    whichever is fewest (the set's own on a tie)."""
    best = differences(row, pins)
    for stack in row.image_stacks:
        diff = differences(row, pins, stack)
        if len(diff) < len(best):
            best = diff
    return best


@dataclass(frozen=True)
class MatchResult:
    applies: bool                     # False: no NPU stack pinned, no set applies
    row: ReleaseSet | None            # the matching set
    nearest: ReleaseSet | None        # when nothing matches
    differs: tuple[Difference, ...] = ()
    # a pinned vllm_ascend that is no known release: where it falls among them
    unknown_release: str | None = None


def _by_version_order(pinned: str, matrix: ReleaseMatrix) -> tuple[ReleaseSet, str] | None:
    """For a vllm_ascend pin that is no known release: the newest release below it (the
    oldest when it is below them all) and a note saying where it falls; None for a known
    release."""
    wanted = try_parse_version(pinned)
    if wanted is None or any(_pin_matches(pinned, r.vllm_ascend) for r in matrix.releases):
        return None
    ordered = sorted(matrix.releases, key=lambda r: parse_version(r.vllm_ascend))
    below = [r for r in ordered if parse_version(r.vllm_ascend) < wanted]
    if not below:
        return ordered[0], f"vllm_ascend {pinned} is older than any known release"
    if below[-1] is ordered[-1]:
        return below[-1], (f"vllm_ascend {pinned} is newer than any known release (a newer "
                           "ascendctl may know its set)")
    return below[-1], f"vllm_ascend {pinned} is no known release"


def match_versions(pins: Mapping[str, str | None],
                   matrix: ReleaseMatrix | None = None) -> MatchResult:
    """The release set the pinned versions belong to, or the nearest one and how it
    differs. Nearest: for a pinned vllm-ascend that is no known release, the newest
    release below it; otherwise fewest differing components, then the pinned
    vllm-ascend, then the newest release."""
    matrix = matrix or load_matrix()
    given = {k: str(v) for k, v in pins.items() if v}
    if not any(k in given for k in ASCEND_ONLY):
        return MatchResult(False, None, None)
    if "vllm_ascend" in given:
        placed = _by_version_order(given["vllm_ascend"], matrix)
        if placed is not None:
            row, note = placed
            return MatchResult(True, None, row, tuple(closest_differences(row, given)),
                               unknown_release=note)
    scored = []
    for row in matrix.releases:
        diff = closest_differences(row, given)
        if not diff:
            return MatchResult(True, row, None)
        same_release = "vllm_ascend" in given and _pin_matches(given["vllm_ascend"],
                                                               row.vllm_ascend)
        scored.append((len(diff), not same_release, -matrix.releases.index(row), row, diff))
    scored.sort(key=lambda item: item[:3])
    _, _, _, row, diff = scored[0]
    return MatchResult(True, None, row, tuple(diff))


def describe_row(row: ReleaseSet) -> str:
    return (f"{row.tag}: vLLM {row.vllm}, CANN {row.cann}, torch {row.torch} / torch_npu "
            f"{row.torch_npu}, Python {row.python_text}"
            + (f", HDK {row.hdk.version}" if row.hdk.version else ""))


def check_versions(pins: Mapping[str, str | None], fail: Callable[[str, str], Exception],
                   matrix: ReleaseMatrix | None = None) -> ReleaseSet | None:
    """Raise fail(message, component) when the pinned mix is in no release set; return
    the set it is in (None when no set applies)."""
    matrix = matrix or load_matrix()
    result = match_versions(pins, matrix)
    if not result.applies or result.row is not None:
        return result.row
    assert result.nearest is not None
    pinned = ", ".join(f"{k} {v}" for k, v in pins.items() if v and k in COMPONENTS)
    first = result.differs[0]
    known = f"{result.unknown_release}; " if result.unknown_release else ""
    message = (f"{pinned} is in no vllm-ascend release set; {known}nearest is "
               f"{describe_row(result.nearest)} — differs: "
               + "; ".join(d.describe() for d in result.differs)
               + " (`ascendctl engine release-set --list` shows every set)")
    raise fail(message, first.component)


# -- image references ------------------------------------------------------------------

@dataclass(frozen=True)
class OfficialTag:
    vllm_ascend: str
    variant: str


def parse_official_tag(reference: str, matrix: ReleaseMatrix | None = None
                       ) -> OfficialTag | None:
    """`quay.io/ascend/vllm-ascend:v0.23.0-a3` -> (0.23.0, a3); None for other images."""
    matrix = matrix or load_matrix()
    repository, _, tag = reference.partition("@")[0].rpartition(":")
    if repository != matrix.image_repository or not tag.startswith("v"):
        return None
    for variant, suffix in sorted(matrix.image_variants.items(), key=lambda kv: -len(kv[1])):
        if suffix and tag.endswith(suffix):
            return OfficialTag(tag[1:-len(suffix)], variant)
    return OfficialTag(tag[1:], "a2")


def chip_variants(chip: str) -> tuple[str, ...]:
    """The image variants for the inventory's chip (A3 for Ascend910_93, A2 otherwise)."""
    if chip == "Ascend910_93":
        return ("a3", "a3-openeuler")
    return ("a2", "a2-openeuler")
