"""Where the lab keeps its images, its registry and each lab's state on the host."""

from __future__ import annotations

import os
from pathlib import Path


def lab_root() -> Path:
    """Root of everything the lab writes on the host (ASCENDCTL_LAB_ROOT overrides)."""
    return Path(os.environ.get("ASCENDCTL_LAB_ROOT", "/var/lib/ascendctl/lab"))


def images_dir() -> Path:
    return lab_root() / "images"


def labs_dir() -> Path:
    return lab_root() / "labs"


def registry_path() -> Path:
    return lab_root() / "registry.json"


def lab_state_dir(name: str) -> Path:
    return labs_dir() / name
