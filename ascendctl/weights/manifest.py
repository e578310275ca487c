"""Manifest of a model directory: size, sha256 and sampled fingerprint of every file.

Paths are relative (POSIX) so a manifest describes the content, not where it sits.
Hashing runs in threads (hashlib releases the GIL) and goes through `HashCache`.
Entries whose name starts with "." (.git, .cache, ...) are not part of a model.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ascendctl.errors import AscendctlError, InputError
from ascendctl.inventory.inputfile import non_regular, parse_json, read_input_text, shown
from ascendctl.weights.cache import CachedHash, HashCache
from ascendctl.weights.nodehelper import helper_module
from ascendctl.weights.paths import check_relative, json_line_of, resolve_inside

MANIFEST_FORMAT = "ascendctl-weights-manifest/1"
INDEX_NAME = "model.safetensors.index.json"
MAX_MANIFEST_BYTES = 64 << 20    # about 250 000 entries


@dataclass(frozen=True)
class FileEntry:
    path: str            # relative to the model directory, POSIX separators
    size: int
    sha256: str
    fingerprint: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def to_dict(self) -> dict:
        return {"format": MANIFEST_FORMAT, "files": len(self.files),
                "total_bytes": self.total_bytes,
                "entries": [asdict(f) for f in self.files]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"


def list_model_files(root: Path) -> list[str]:
    """Relative paths of the regular files under root (symlinks must stay inside); a FIFO,
    device, socket or broken link is refused by name before anything is read."""
    root = Path(root)
    if not root.is_dir():
        raise InputError("is not a directory", file=str(root))
    real_root = os.path.realpath(root)
    found: list[str] = []
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real_dir = os.path.realpath(dirpath)
        if real_dir in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(real_dir)
        rel_dir = os.path.relpath(dirpath, root)
        if real_dir != real_root and not real_dir.startswith(real_root + os.sep):
            raise InputError(f"directory {rel_dir!r} is a symlink to {real_dir}, outside the "
                             "model directory", file=str(root))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            resolve_inside(root, rel, where=str(root))
            kind = non_regular(root / rel)
            if kind is not None:
                raise InputError(f"{shown(rel)} is {kind}, not a regular file: a model "
                                 "directory holds regular files (or links to them) only",
                                 file=str(root))
            found.append(rel)
    return sorted(found)


def _hash_one(root: Path, rel: str, cache: HashCache) -> FileEntry:
    helper = helper_module()
    real = os.path.realpath(root / rel)
    st = os.stat(real)
    cached = cache.get(real, st.st_size, st.st_mtime_ns)
    if cached is None:
        sha = helper.sha256_file(real).hexdigest()
        fingerprint = helper.fingerprint_file(real, st.st_size)
        after = os.stat(real)
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            raise AscendctlError(f"{root}/{rel} changed while it was being hashed; is "
                                 "something still writing the model?")
        cached = CachedHash(sha, fingerprint)
        cache.put(real, st.st_size, st.st_mtime_ns, cached)
    return FileEntry(rel, st.st_size, cached.sha256, cached.fingerprint)


def build_manifest(root: str | os.PathLike[str], *, cache: HashCache | None = None,
                   workers: int | None = None,
                   files: list[str] | None = None) -> Manifest:
    """Hash every model file (or just `files`) of `root`, in parallel, through the cache."""
    root = Path(root)
    cache = cache if cache is not None else HashCache(None)
    names = files if files is not None else list_model_files(root)
    for rel in names:
        resolve_inside(root, rel, where=str(root))
    workers = workers or max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        entries = list(pool.map(lambda rel: _hash_one(root, rel, cache), names))
    cache.save()
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest written by `to_json` (a regular file, bounded in size and depth),
    refusing entries that could escape a directory."""
    where = str(path)
    text = read_input_text(path, limit=MAX_MANIFEST_BYTES, what="weights manifest")
    data = parse_json(text, file=where, what="weights manifest", max_bytes=MAX_MANIFEST_BYTES)
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise InputError(f"not an ascendctl weights manifest (format {MANIFEST_FORMAT})",
                         file=where, field="format")
    raw_entries = data.get("entries") or []
    if not isinstance(raw_entries, list):
        raise InputError("must be a list", file=where, field="entries")
    entries = []
    for number, raw in enumerate(raw_entries):
        field = f"entries[{number}]"
        if not isinstance(raw, dict):
            raise InputError("must be an object", file=where, field=field)
        entry = _entry(raw)
        if entry is None:
            raise InputError("needs path, size, sha256 and fingerprint", file=where,
                             line=_line(text, raw.get("path")), field=field)
        try:
            rel = check_relative(entry.path, where=where, field=field + ".path")
        except InputError as err:
            raise InputError(err.reason, file=where, line=_line(text, entry.path),
                             field=err.field) from None
        entries.append(FileEntry(rel, entry.size, entry.sha256, entry.fingerprint))
    return Manifest(tuple(entries))


def _entry(raw: dict) -> FileEntry | None:
    """An entry whose fields have the types to_json writes, else None."""
    path, size = raw.get("path"), raw.get("size")
    sha256, fingerprint = raw.get("sha256"), raw.get("fingerprint")
    if not (isinstance(path, str) and isinstance(size, int) and not isinstance(size, bool)
            and size >= 0 and isinstance(sha256, str) and isinstance(fingerprint, str)):
        return None
    return FileEntry(path, size, sha256, fingerprint)


def _line(text: str, name: object) -> int | None:
    # looked up only for an error: for every entry it would be quadratic
    return json_line_of(text, name) if isinstance(name, str) else None
