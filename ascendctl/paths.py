"""Where the data the tool reads at run time lives: inside the installed package.

The repository keeps them at the top level (`templates/`, `playbooks/`, `runtime/`) so the
layout shows the architecture; the build maps them into the package (`ascendctl.templates`,
`ascendctl.playbooks`, and the node-side package `ascendctl_runtime`), so a wheel, a pipx
install and an editable checkout all find them the same way, through importlib.resources.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def _package_dir(package: str) -> Path:
    root = resources.files(package)
    path = Path(str(root))
    if not path.is_dir():   # e.g. a zip import: every reader here needs real files
        raise RuntimeError(f"{package} is not installed as a directory ({root})")
    return path


def templates_dir() -> Path:
    return _package_dir("ascendctl.templates")


def playbooks_dir() -> Path:
    return _package_dir("ascendctl.playbooks")


def runtime_dir() -> Path:
    """The node-side package directory (ascendctl_runtime), shipped to nodes from here."""
    return _package_dir("ascendctl_runtime")


def package_data(package: str) -> Path:
    """A data directory inside one of ascendctl's own packages (e.g. ascendctl.doctor)."""
    return _package_dir(package)
