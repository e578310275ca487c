"""The compatibility matrix the version checks read (vllm-ascend <-> vLLM <-> CANN <->
torch/torch_npu <-> Python): a view over the release sets the engine ships
(ascendctl/releases/data/release_sets.yaml, docs/engine.md), so there is one matrix."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ascendctl.facts.versions import Version, parse_version
from ascendctl.releases.sets import SCHEMA, load_matrix as release_sets


@dataclass(frozen=True)
class Release:
    vllm_ascend: Version
    vllm: Version
    cann: Version
    torch: Version
    torch_npu: Version
    python_min: tuple[int, int]
    python_max: tuple[int, int]
    hdk: Version | None = None           # the validated HDK (driver), when a source states it

    def python_ok(self, version: Version) -> bool:
        return self.python_min <= version.release[:2] <= self.python_max

    @property
    def python_text(self) -> str:
        return f"{self.python_min[0]}.{self.python_min[1]}-{self.python_max[0]}.{self.python_max[1]}"


@dataclass(frozen=True)
class CompatMatrix:
    matrix_version: str
    releases: tuple[Release, ...]

    def release_for(self, vllm_ascend: Version) -> Release | None:
        for r in self.releases:
            if r.vllm_ascend == vllm_ascend:
                return r
        return None

    def releases_with_cann(self, cann: Version) -> tuple[Release, ...]:
        """The sets built on this CANN (a plain `8.5` matches 8.5.x)."""
        return tuple(r for r in self.releases if r.cann == cann or r.cann.startswith(cann)
                     or cann.startswith(r.cann))

    def python_range(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return (min(r.python_min for r in self.releases), max(r.python_max for r in self.releases))


def _minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def _public(text: str) -> Version:
    """The version without a local label (`2.9.0.post1+git4c901a4` -> 2.9.0.post1)."""
    return parse_version(text.split("+", 1)[0])


@lru_cache(maxsize=1)
def load_matrix() -> CompatMatrix:
    sets = release_sets()
    return CompatMatrix(
        f"release-sets-{SCHEMA} ({len(sets.releases)} sets, newest {sets.newest.tag})",
        tuple(Release(vllm_ascend=parse_version(r.vllm_ascend), vllm=_public(r.vllm),
                      cann=parse_version(r.cann), torch=_public(r.torch),
                      torch_npu=_public(r.torch_npu), python_min=_minor(r.python[0]),
                      python_max=_minor(r.python[1]),
                      hdk=parse_version(r.hdk.version) if r.hdk.version and not r.hdk.unverified
                      else None)
              for r in sets.releases))
