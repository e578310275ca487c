"""Writing files on the controller whole or not at all (reports, bundles, rendered files)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], content: bytes, mode: int = 0o644) -> None:
    """Write via a temporary file in the same directory and rename it into place.

    The temporary file is created with `mode` already applied, so a secret is never
    readable by others, not even for an instant; a reader sees the old file or the new
    one, never half of it."""
    path = Path(path)
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
