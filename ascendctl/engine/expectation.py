"""`EngineExpectation`: what the engine checks (ascendctl/checks/engine.py, versions.py)
know about the inventory's engine. The engine's kind fills it (`EngineKind.expectation`);
the checks read only what it declares — a container runtime, an image, a stack the
engine brings, packages that are not the node's — never the kind's name.

Standard library and the node contract only: importing the checks stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ascendctl_runtime.layout import ENGINE_UNIT


@dataclass(frozen=True)
class EnginePackages:
    """The engine's Python packages when they are not the node's Python (e.g. a venv's
    wheelhouse): their versions and how the checks word a problem with them."""

    versions: Mapping[str, str]          # distribution name (normalised) -> version
    error: str | None = None             # why they could not be read (the whole message)
    error_fix: str = ""
    missing: str = "not installed: "     # what the list of missing packages follows
    install: str = "pip install"         # the command that adds packages
    install_into: str = ""               # where it adds them, after the names


@dataclass(frozen=True)
class EngineExpectation:
    """The inventory's serving engine (docs/engine.md): what the engine checks compare."""

    kind: str = "host"                   # the engine's kind, for messages
    runtime: str | None = None           # podman | docker: the engine runs in a container
    image: str | None = None             # engine.image: the nodes must hold it or get it
    archive: str | None = None           # engine.archive on the jump host
    archive_image_id: str | None = None  # the image the archive holds
    archive_cann: Any = None             # facts.engine.ImageCann read from the archive
    archive_error: str | None = None     # the archive cannot be read
    # what carries the engine's CANN toolkit and Python stack instead of the node
    # ("image"); None: the node's own
    stack_from: str | None = None
    packages: EnginePackages | None = None   # None: the engine uses the node's Python
    own_unit: str = ENGINE_UNIT
    own_container: str = "ascendctl-engine"
    allow_own: bool = True               # our own engine may hold the NPUs (re-deploy)
    unsafe: tuple[str, ...] = ()         # acknowledged unsafe options (engine.allow_unsafe)
