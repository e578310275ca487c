"""The release-set matrix (data/release_sets.yaml): which vLLM, CANN, torch, torch_npu,
Triton-Ascend, HDK and Python each vllm-ascend release was validated with, and the
image tags it ships. Lookups, the nearest set to a mix of versions, and the check the
inventory loader runs on `versions:`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ascendctl.facts.versions import Version, VersionError, parse_version, try_parse_version
from ascendctl.paths import package_data

SCHEMA = 1
# The inventory's `versions:` fields a release set pins (driver is compared with the
# set's HDK; firmware is the driver's business, see preflight).
COMPONENTS = ("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "python", "driver")
# Pinning one of these names an NPU stack: without them the inventory describes a stack
# without vllm-ascend (the lab's vLLM CPU build) and no release set applies.
ASCEND_ONLY = ("vllm_ascend", "torch_npu")


class MatrixError(ValueError):
    """The shipped matrix is malformed (a packaging bug, not bad input)."""


@dataclass(frozen=True)
class Hdk:
    version: str | None
    unverified: bool
    note: str = ""


@dataclass(frozen=True)
class ReleaseSet:
    vllm_ascend: str
    date: str
    prerelease: bool
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
    images_unverified: bool
    sources: tuple[str, ...]

    @property
    def tag(self) -> str:
        return f"v{self.vllm_ascend}"

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

    def to_dict(self, variants: Mapping[str, str], repository: str) -> dict[str, Any]:
        return {
            "vllm_ascend": self.vllm_ascend, "tag": self.tag, "date": self.date,
            "prerelease": self.prerelease, "vllm": self.vllm, "cann": self.cann,
            "torch": self.torch, "torch_npu": self.torch_npu,
            "triton_ascend": self.triton_ascend, "mooncake": self.mooncake,
            "nnal": self.nnal, "python": list(self.python), "image_python": self.image_python,
            "hdk": {"version": self.hdk.version, "unverified": self.hdk.unverified,
                    "note": self.hdk.note},
            "images": {v: f"{repository}:{t}" for v, t in self.image_tags(variants).items()},
            "images_unverified": self.images_unverified,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class ReleaseMatrix:
    image_repository: str
    image_variants: dict[str, str]       # variant -> tag suffix
    releases: tuple[ReleaseSet, ...]     # oldest first

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


def _text(value: Any) -> str:
    return str(value)


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_matrix(data: Any) -> ReleaseMatrix:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MatrixError(f"release_sets.yaml: schema must be {SCHEMA}")
    variants = {str(k): str(v) for k, v in (data.get("image_variants") or {}).items()}
    rows = []
    for raw in data.get("releases") or []:
        try:
            hdk = raw["hdk"] or {}
            row = ReleaseSet(
                vllm_ascend=_text(raw["vllm_ascend"]), date=_text(raw["date"]),
                prerelease=bool(raw["prerelease"]), vllm=_text(raw["vllm"]),
                cann=_text(raw["cann"]), torch=_text(raw["torch"]),
                torch_npu=_text(raw["torch_npu"]),
                triton_ascend=_optional(raw.get("triton_ascend")),
                mooncake=_optional(raw.get("mooncake")), nnal=_optional(raw.get("nnal")),
                python=(str(raw["python"][0]), str(raw["python"][1])),
                image_python=_optional(raw.get("image_python")),
                hdk=Hdk(_optional(hdk.get("version")), bool(hdk.get("unverified")),
                        str(hdk.get("note") or "")),
                image_variants=tuple(str(v) for v in raw.get("image_variants") or ()),
                images_unverified=bool(raw.get("images_unverified", False)),
                sources=tuple(str(s) for s in raw.get("sources") or ()),
            )
            for text in (row.vllm_ascend, row.vllm, row.cann, row.torch, row.torch_npu,
                         *row.python):
                parse_version(text)
        except (KeyError, TypeError, IndexError, VersionError) as err:
            raise MatrixError(f"release_sets.yaml: bad row {raw!r}: {err}") from None
        unknown = [v for v in row.image_variants if v not in variants]
        if unknown:
            raise MatrixError(f"release_sets.yaml: {row.tag}: unknown variants {unknown}")
        rows.append(row)
    rows.sort(key=lambda r: parse_version(r.vllm_ascend))
    return ReleaseMatrix(str(data.get("image_repository", "")), variants, tuple(rows))


@lru_cache(maxsize=1)
def load_matrix() -> ReleaseMatrix:
    import yaml

    path = package_data("ascendctl.engine") / "data" / "release_sets.yaml"
    return parse_matrix(yaml.safe_load(path.read_text(encoding="utf-8")))


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


def differences(row: ReleaseSet, pins: Mapping[str, str]) -> list[Difference]:
    """The pinned components that do not fit ROW, in COMPONENTS order."""
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
            expected = row.value(component) or ""
            if not _pin_matches(pinned, expected):
                out.append(Difference(component, pinned, expected,
                                      f"the set has {expected}"))
    return out


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
            return MatchResult(True, None, row, tuple(differences(row, given)),
                               unknown_release=note)
    scored = []
    for row in matrix.releases:
        diff = differences(row, given)
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
