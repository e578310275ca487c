"""The versioned compatibility matrix (vllm-ascend <-> vLLM <-> CANN <-> torch/torch_npu
<-> Python), shipped as data in `data/compat.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ascendctl.facts.versions import Version, parse_version
from ascendctl.paths import package_data

MATRIX_PATH = package_data("ascendctl.checks") / "data" / "compat.json"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Release:
    vllm_ascend: Version
    vllm: Version
    cann: Version
    torch: Version
    torch_npu: Version
    python_min: tuple[int, int]
    python_max: tuple[int, int]

    def python_ok(self, version: Version) -> bool:
        return self.python_min <= version.release[:2] <= self.python_max

    @property
    def python_text(self) -> str:
        return f"{self.python_min[0]}.{self.python_min[1]}-{self.python_max[0]}.{self.python_max[1]}"


@dataclass(frozen=True)
class CompatMatrix:
    matrix_version: str
    supported_chips: tuple[str, ...]
    releases: tuple[Release, ...]

    def release_for(self, vllm_ascend: Version) -> Release | None:
        for r in self.releases:
            if r.vllm_ascend == vllm_ascend:
                return r
        return None

    def python_range(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return (min(r.python_min for r in self.releases), max(r.python_max for r in self.releases))


def _minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def parse_matrix(data: dict) -> CompatMatrix:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"compat matrix schema_version {data.get('schema_version')!r}, "
                         f"expected {SCHEMA_VERSION}")
    releases = []
    for row in data["releases"]:
        releases.append(Release(
            vllm_ascend=parse_version(row["vllm_ascend"]), vllm=parse_version(row["vllm"]),
            cann=parse_version(row["cann"]), torch=parse_version(row["torch"]),
            torch_npu=parse_version(row["torch_npu"]),
            python_min=_minor(row["python"][0]), python_max=_minor(row["python"][1]),
        ))
    return CompatMatrix(str(data["matrix_version"]), tuple(data.get("supported_chips", ())),
                        tuple(releases))


@lru_cache(maxsize=1)
def load_matrix(path: str | None = None) -> CompatMatrix:
    with open(path or MATRIX_PATH, encoding="utf-8") as fh:
        return parse_matrix(json.load(fh))
