"""Where the project's data directories live (templates, playbooks, runtime).

In a source checkout (or an editable install) they sit next to the package; the
ASCENDCTL_SHARE environment variable points elsewhere when installed differently.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def share_dir() -> Path:
    override = os.environ.get("ASCENDCTL_SHARE")
    return Path(override) if override else PACKAGE_DIR.parent


def templates_dir() -> Path:
    return share_dir() / "templates"


def playbooks_dir() -> Path:
    return share_dir() / "playbooks"


def runtime_dir() -> Path:
    """The node-side package directory (runtime/ascendctl_runtime)."""
    return share_dir() / "runtime" / "ascendctl_runtime"
