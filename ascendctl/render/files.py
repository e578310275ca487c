"""Rendered files and how they reach a disk: atomically, with their mode from the start."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ascendctl.errors import InputError
from ascendctl.fileio import write_atomic

RELEASE_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
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
        if self.secret and self.mode & 0o077:
            raise ValueError(f"internal: secret file {self.path} must be mode 0600")


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID_RE.fullmatch(release_id) or release_id in (".", ".."):
        raise InputError(f"release id {release_id!r}: use letters, digits, '.', '_' or '-'")
    return release_id


def release_dir(root: str, release_id: str) -> str:
    """`<deploy.root>/releases/<release_id>` on the nodes."""
    check_release_id(release_id)
    return f"{root.rstrip('/') or ''}/releases/{release_id}"


def write_files(base: Path, files: list[RenderedFile]) -> list[Path]:
    written = []
    for item in files:
        target = base / item.path
        write_atomic(target, item.content, item.mode)
        written.append(target)
    return written
