"""Push arbitrary files (an engine image archive, a wheelhouse) into every node's
content-addressed store with the weights machinery: the same relay, resume, sha256
verification on arrival and disk check, through the public `push` entry point.

The files become a one-directory "model" plan that every node needs whole; nothing is
materialised (callers use the store objects by sha256)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.weights.cache import HashCache, default_cache_path
from ascendctl.weights.manifest import FileEntry, build_manifest
from ascendctl.weights.plan import NodePlan, PlannedFile, WeightsPlan
from ascendctl.weights.push import PushSummary, push


def hashed_files(paths: Sequence[Path], *, cache: HashCache | None = None
                 ) -> list[PlannedFile]:
    """Size, sha256 and fingerprint of each file (through the shared hash cache: an
    unchanged file is not hashed again). Names must be unique."""
    if cache is None:
        cache = HashCache(default_cache_path())
    by_dir: dict[Path, list[str]] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputError("is not a file on this machine", file=str(path))
        by_dir.setdefault(path.parent, []).append(path.name)
    planned: dict[str, PlannedFile] = {}
    for directory, names in by_dir.items():
        for entry in build_manifest(directory, cache=cache, files=names).files:
            if entry.path in planned:
                raise InputError(f"two files are named {entry.path}", file=str(directory))
            planned[entry.path] = PlannedFile(entry.path, directory / entry.path,
                                              FileEntry(entry.path, entry.size, entry.sha256,
                                                        entry.fingerprint))
    return [planned[name] for name in sorted(planned)]


def files_plan(inv, files: Sequence[PlannedFile], hosts=None) -> WeightsPlan:
    """Every host (or `hosts`) needs every file."""
    hosts = inv.hosts if hosts is None else hosts
    root = files[0].source.parent if files else Path(".")
    return WeightsPlan(model_dir=root, mode="files", tp=1, pp=1, split=None,
                       nodes=[NodePlan(h.name, h.rank, None, list(files)) for h in hosts])


def push_files(inv, paths: Sequence[Path], *, show_progress: bool = True, pool=None,
               cache: HashCache | None = None, hosts=None) -> tuple[PushSummary,
                                                                   list[PlannedFile]]:
    """Relay PATHS into the store of every node; returns the summary and the objects."""
    files = hashed_files(paths, cache=cache)
    return push(inv, files_plan(inv, files, hosts), show_progress=show_progress,
                pool=pool), files
