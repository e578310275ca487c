"""Relative paths inside a model directory that cannot escape it.

Manifests and indexes name files by relative path; a hostile or broken index may name
`../../etc/passwd`, an absolute path, or a symlink leading out of the directory. Every
such name is refused here, before anything reads or sends the file.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ascendctl.errors import InputError


def check_relative(name: object, *, where: str, field: str | None = None,
                   line: int | None = None) -> str:
    """A normalised relative POSIX path, or InputError if it could leave the directory."""
    if not isinstance(name, str) or not name:
        raise InputError("empty file name", file=where, line=line, field=field)
    if "\x00" in name or any(ord(ch) < 32 for ch in name):
        raise InputError(f"file name {name!r} contains control characters", file=where,
                         line=line, field=field)
    if "\\" in name:
        raise InputError(f"file name {name!r} contains a backslash", file=where, line=line,
                         field=field)
    path = PurePosixPath(name)
    if path.is_absolute():
        raise InputError(f"file name {name!r} is absolute; entries must be relative to the "
                         "model directory", file=where, line=line, field=field)
    if any(part == ".." for part in path.parts):
        raise InputError(f"file name {name!r} escapes the model directory", file=where,
                         line=line, field=field)
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts:
        raise InputError(f"file name {name!r} names the directory itself", file=where,
                         line=line, field=field)
    return "/".join(parts)


def resolve_inside(root: Path, name: str, *, where: str, field: str | None = None,
                   line: int | None = None) -> Path:
    """`root/name` after following symlinks, refused unless it stays inside `root`."""
    rel = check_relative(name, where=where, field=field, line=line)
    real_root = Path(os.path.realpath(root))
    target = Path(os.path.realpath(real_root / rel))
    if target != real_root and real_root not in target.parents:
        raise InputError(f"file name {name!r} resolves to {target}, outside the model "
                         f"directory {real_root} (symlink?)", file=where, line=line,
                         field=field)
    return target


def json_line_of(text: str, needle: str) -> int | None:
    """Line number (1-based) of the first occurrence of a JSON string `needle`."""
    import json

    quoted = json.dumps(needle)
    pos = text.find(quoted)
    if pos < 0:
        return None
    return text.count("\n", 0, pos) + 1
