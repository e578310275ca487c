"""What preflight needs to know about the inventory's engine: the gather parameters of the
engine facts (ascendctl/facts/engine.py) and the `EngineExpectation` the engine checks
(ascendctl/checks/engine.py) compare the facts with.

Read on this machine only: the archive's image ID (its manifest) and the CANN version
files inside it (cached by path, size and mtime), the wheelhouse's package versions
(wheel file names). A problem with them is reported by a check, not raised: preflight
still judges everything else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ascendctl_runtime.layout import ENGINE_UNIT

from ascendctl.checks.expectations import EngineExpectation
from ascendctl.errors import AscendctlError
from ascendctl.inventory import Inventory
from ascendctl.render.container import CONTAINER_NAME

WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-")


def _archive_id(inv: Inventory) -> str | None:
    from ascendctl.engine.identity import read_archive

    try:
        return read_archive(inv.engine.archive).image_id if inv.engine.archive else None
    except AscendctlError:
        return None


def engine_gather_params(inv: Inventory) -> dict[str, Any]:
    """GatherParams fields for the engine: the runtime and the images to look for (the
    archive's image ID first: what the release runs), the venv's Python."""
    spec = inv.engine
    if spec.kind == "venv":
        return {"python": spec.python or inv.deploy.python}
    if spec.kind != "container":
        return {}
    images = tuple(i for i in (_archive_id(inv), spec.image) if i)
    return {"engine_runtime": spec.runtime, "engine_runtime_path": spec.runtime_executable,
            "engine_images": images}


def wheel_versions(directory: str) -> dict[str, str]:
    """Distribution name (normalised: lower case, `_`) -> version, from wheel file names."""
    out: dict[str, str] = {}
    for path in sorted(Path(directory).glob("*.whl")):
        match = WHEEL_RE.match(path.name)
        if match:
            name = re.sub(r"[-_.]+", "_", match.group("name")).lower()
            out[name] = match.group("version")
    return out


def engine_expectation(inv: Inventory, *, allow_own: bool = True) -> EngineExpectation:
    from ascendctl.engine.archive_files import cached_archive_files
    from ascendctl.engine.identity import read_archive
    from ascendctl.facts.engine import CANN_FILES, image_cann_from_files

    spec = inv.engine
    common: dict[str, Any] = {"kind": spec.kind, "own_unit": ENGINE_UNIT,
                              "own_container": CONTAINER_NAME, "allow_own": allow_own}
    if spec.kind == "venv":
        try:
            packages = wheel_versions(spec.wheelhouse or "")
            error = None if packages else f"{spec.wheelhouse} holds no wheels"
        except OSError as err:
            packages, error = {}, f"{spec.wheelhouse}: {err.strerror}"
        return EngineExpectation(packages=packages, wheelhouse_error=error, **common)
    if spec.kind != "container":
        return EngineExpectation(**common)
    common.update(runtime=spec.runtime, image=spec.image, archive=spec.archive,
                  unsafe=inv.unsafe_engine_options)
    if not spec.archive:
        return EngineExpectation(**common)
    try:
        image_id = read_archive(spec.archive).image_id
        files = cached_archive_files(spec.archive, CANN_FILES)
    except (AscendctlError, OSError, ValueError, KeyError) as err:
        return EngineExpectation(archive_error=str(err), **common)
    return EngineExpectation(archive_image_id=image_id,
                             archive_cann=image_cann_from_files(files, spec.archive), **common)
