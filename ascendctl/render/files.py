"""Rendered files and how they reach a disk: atomically, with their mode from the start."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ascendctl.errors import InputError

RELEASE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
REDACTED = "<redacted: render with --show-secrets>"


@dataclass(frozen=True)
class RenderedFile:
    path: str          # relative to the release directory (or the cluster directory)
    content: bytes
    mode: int = 0o644
    secret: bool = False

    def __post_init__(self) -> None:
        rel = PurePosixPath(self.path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"rendered path must be relative and inside: {self.path!r}")


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID_RE.match(release_id) or release_id in (".", ".."):
        raise InputError(f"release id {release_id!r}: use letters, digits, '.', '_' or '-'")
    return release_id


def release_dir(root: str, release_id: str) -> str:
    """`<deploy.root>/releases/<release_id>` on the nodes."""
    check_release_id(release_id)
    return f"{root.rstrip('/') or ''}/releases/{release_id}"


def write_atomic(path: Path, content: bytes, mode: int) -> None:
    """Write via a temporary file in the same directory and rename it into place.

    The temporary file is created with `mode` already applied, so a secret is never
    readable by others, not even for an instant."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_files(base: Path, files: list[RenderedFile]) -> list[Path]:
    written = []
    for item in files:
        target = base / item.path
        write_atomic(target, item.content, item.mode)
        written.append(target)
    return written
