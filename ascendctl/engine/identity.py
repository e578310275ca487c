"""The engine's identity: what makes two releases run the same engine or not, and the
readers of what it is computed from on this machine.

Each kind computes its own (ascendctl/engine/kinds/): a container is its image ID, the
sha256 of the image's config JSON, read from an archive without loading anything
(`manifest.json` → `Config` → sha256 of that member; ascendctl.engine.image_archive) or
reported by the nodes; a venv is a hash over the wheelhouse's content (sorted file names
with their sha256), the node Python that builds it and the packages asked for; a host
engine is the executable's name.

A changed identity is a new release (`release_component()` goes into the release id).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.engine.image_archive import ArchiveImage, read_archive  # noqa: F401
from ascendctl.errors import AscendctlError, InputError
from ascendctl.inventory.inputfile import open_input_file, shown
from ascendctl.weights.manifest import build_manifest

HEX = frozenset("0123456789abcdef")
MAX_WHEELS = 4096                   # a vllm-ascend wheelhouse has about 200
WHEELHOUSE = "engine.wheelhouse"


class EngineError(AscendctlError):
    """The engine is not where a release needs it (missing or different on a node)."""


@dataclass(frozen=True)
class EngineIdentity:
    kind: str                 # the engine kind's name
    id: str                   # e.g. host:<command> | sha256:<hex> | venv:<hex>
    short: str = field(compare=False)   # a short form for names (history, messages)
    detail: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def release_component(self) -> str:
        """The line the release planner hashes into the release id."""
        return f"engine {self.kind} {self.id}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "short": self.short, **self.detail}


def normalise_image_id(text: str) -> str:
    """`podman image inspect --format {{.Id}}` prints bare hex, docker `sha256:<hex>`."""
    value = text.strip().lower().removeprefix("sha256:")
    if len(value) != 64 or not set(value) <= HEX:
        raise ValueError(f"not an image ID: {text.strip()[:80]!r}")
    return "sha256:" + value


# -- wheelhouses -----------------------------------------------------------------------

@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    files: tuple[Any, ...]              # weights.manifest.FileEntry per wheel, by name
    digest: str                         # sha256 over "name sha256" lines

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def read_wheelhouse(path: str | os.PathLike[str], *, cache: Any = None) -> Wheelhouse:
    """Every *.whl in the directory, hashed (through the weights hash cache). The wheels
    are hashed as bytes and never opened as zips: what is in them is pip's to judge on
    the node. Each must be a regular file inside the directory (a symlink may point to
    another file in it), and there may be at most MAX_WHEELS."""
    root = Path(os.path.expanduser(str(path)))
    try:
        mode = os.stat(root).st_mode
    except OSError as err:
        raise InputError(f"is not a directory on this machine ({err.strerror})",
                         file=str(root), field=WHEELHOUSE) from None
    if not stat.S_ISDIR(mode):
        raise InputError("is not a directory on this machine (a file: give the directory "
                         "of wheels)", file=str(root), field=WHEELHOUSE)
    names = _wheel_names(root)
    if not names:
        raise InputError("holds no wheels (*.whl)", file=str(root), field=WHEELHOUSE)
    for name in names:
        _check_wheel(root, name)
    manifest = build_manifest(root, cache=cache, files=names)
    return Wheelhouse(root, manifest.files, wheelhouse_digest(
        (f.path, f.sha256) for f in manifest.files))


def _wheel_names(root: Path) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(root) as listing:
            for entry in listing:
                if not entry.name.endswith(".whl"):
                    continue
                names.append(entry.name)
                if len(names) > MAX_WHEELS:
                    raise InputError(f"holds more than {MAX_WHEELS} wheels", file=str(root),
                                     field=WHEELHOUSE)
    except OSError as err:
        raise InputError(f"cannot be listed: {err.strerror}", file=str(root),
                         field=WHEELHOUSE) from None
    return sorted(names)


def _check_wheel(root: Path, name: str) -> None:
    """A regular file inside ROOT: a FIFO or device would hang or never end the hash, a
    symlink out of the directory would ship a file nobody put in the wheelhouse."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(root / name)
    if not real.startswith(real_root + os.sep):
        raise InputError(f"wheel {shown(name)} is a symlink to {shown(real)}, outside the "
                         "wheelhouse", file=str(root), field=WHEELHOUSE)
    with open_input_file(root / name, what="wheel", field=WHEELHOUSE):
        pass


def wheelhouse_digest(entries) -> str:
    lines = "".join(f"{name} {sha}\n" for name, sha in sorted(entries))
    return hashlib.sha256(lines.encode()).hexdigest()
