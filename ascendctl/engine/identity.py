"""The engine's identity: what makes two releases run the same engine or not.

- container: the image ID, i.e. the sha256 of the image's config JSON. From an archive it
  is read without loading anything (`manifest.json` → `Config` → sha256 of that member;
  ascendctl.engine.image_archive);
  without an archive the nodes report it (`podman image inspect --format {{.Id}}`), and
  every node must hold the same one.
- venv: a hash over the wheelhouse's content (sorted file names with their sha256), the
  node Python that builds the venv and the packages asked for.
- host: the executable's name; what it runs is outside ascendctl's control.

A changed identity is a new release (`release_component()` goes into the release id).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.engine.image_archive import ArchiveImage, read_archive  # noqa: F401
from ascendctl.errors import AscendctlError, InputError
from ascendctl.inventory.inputfile import open_input_file, shown

HEX = frozenset("0123456789abcdef")
MAX_WHEELS = 4096                   # a vllm-ascend wheelhouse has about 200
WHEELHOUSE = "engine.wheelhouse"


class EngineError(AscendctlError):
    """The engine is not where a release needs it (missing or different on a node)."""


@dataclass(frozen=True)
class EngineIdentity:
    kind: str                 # host | container | venv
    id: str                   # host:<command> | sha256:<hex> | venv:<hex>
    detail: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def short(self) -> str:
        """A short form for names (release ids, venv directories)."""
        if self.kind == "container":
            return "img-" + self.id.removeprefix("sha256:")[:12]
        if self.kind == "venv":
            return "venv-" + self.id.removeprefix("venv:")[:12]
        return "host"

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
    from ascendctl.weights.manifest import build_manifest

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


def venv_digest(wheelhouse: str, python: str, packages: tuple[str, ...] | list[str]) -> str:
    """What a venv on a node is built from: the same inputs give the same directory."""
    text = json.dumps({"wheelhouse": wheelhouse, "python": python,
                       "packages": sorted(packages)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


ENGINES_DIR = "engines"


def venv_dir(root: str, identity: EngineIdentity) -> str:
    """`<deploy.root>/engines/venv/<digest>`: where a node builds the release's venv."""
    return f"{root.rstrip('/')}/{ENGINES_DIR}/venv/{identity.id.removeprefix('venv:')}"


def venv_command(root: str, identity: EngineIdentity, command: str) -> str:
    """The engine executable of a venv release (replaces argv[0] of the engine)."""
    return f"{venv_dir(root, identity)}/bin/{command}"


# -- resolving an inventory's engine ---------------------------------------------------

def host_identity(command: str) -> EngineIdentity:
    return EngineIdentity("host", f"host:{command}", {"command": command})


def archive_identity(archive: str, image: str) -> tuple[EngineIdentity, ArchiveImage]:
    held = read_archive(archive)
    return EngineIdentity("container", held.image_id,
                          {"image": image, "archive": str(held.path)}), held


def venv_identity(wheelhouse: Wheelhouse, python: str, packages) -> EngineIdentity:
    digest = venv_digest(wheelhouse.digest, python, tuple(packages))
    return EngineIdentity("venv", f"venv:{digest}",
                          {"wheelhouse": str(wheelhouse.path),
                           "wheelhouse_sha256": wheelhouse.digest, "python": python})


def identity_from_nodes(image: str, image_ids: Mapping[str, str | None]) -> EngineIdentity:
    """The image every node holds under IMAGE (no archive to read it from). Refuses,
    naming the nodes, when some lack it or hold different images."""
    missing = sorted(node for node, value in image_ids.items() if not value)
    if missing:
        raise EngineError(f"image {image} is not on {', '.join(missing)} and the inventory "
                          "gives no engine.archive to load it from")
    ids: dict[str, list[str]] = {}
    for node, value in image_ids.items():
        ids.setdefault(normalise_image_id(str(value)), []).append(node)
    if len(ids) > 1:
        listing = "; ".join(f"{i[7:19]} on {', '.join(sorted(n))}" for i, n in sorted(ids.items()))
        raise EngineError(f"image {image} differs between nodes: {listing}")
    (image_id,) = ids
    return EngineIdentity("container", image_id, {"image": image})


def resolve_identity(inv: Any, *, node_image_ids: Mapping[str, str | None] | None = None,
                     cache: Any = None) -> EngineIdentity:
    """The identity of INV's engine. Container engines without an archive need the IDs
    the nodes report (`node_image_ids`, from EngineNodeOps.image_id)."""
    spec = inv.engine
    if spec.kind == "host":
        return host_identity(inv.serving.engine)
    if spec.kind == "container":
        if spec.archive:
            return archive_identity(spec.archive, spec.image)[0]
        if node_image_ids is None:
            raise ValueError("a container engine without an archive needs the nodes' image IDs")
        return identity_from_nodes(spec.image, node_image_ids)
    wheelhouse = read_wheelhouse(spec.wheelhouse, cache=cache)
    return venv_identity(wheelhouse, spec.python or inv.deploy.python, spec.packages)
