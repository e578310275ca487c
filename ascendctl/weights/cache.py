"""A hash cache keyed by (real path, size, mtime_ns), so an unchanged 800 GB directory
is re-manifested in a second.

One JSON file, rewritten atomically under an exclusive lock; entries whose file changed
are simply recomputed. Like rsync's quick check, a rewrite that keeps both size and
nanosecond mtime goes unnoticed: `--no-cache` forces a full pass.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import load_json_file, non_regular

CACHE_VERSION = 1
MAX_CACHE_BYTES = 64 << 20      # about 250 000 files


def default_cache_path() -> Path:
    override = os.environ.get("ASCENDCTL_HASH_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "ascendctl" / "weights-hash-cache.json"


@dataclass(frozen=True)
class CachedHash:
    sha256: str
    fingerprint: str


class HashCache:
    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict] = {}
        self.dirty = False
        self.hits = 0
        if path is not None:
            self.entries = self._read(path)

    @staticmethod
    def _read(path: Path) -> dict[str, dict]:
        """The cached entries; none from a cache that is missing, unreadable, too large or
        corrupt (everything is hashed again and the cache rewritten). A FIFO or device
        where the cache should be is refused: it is not ours to replace."""
        kind = non_regular(path)
        if kind in ("missing", "a broken symlink"):
            return {}
        if kind is not None and not kind.startswith("unreadable"):
            raise InputError(f"{kind}, not a regular file: the weights hash cache "
                             "(ASCENDCTL_HASH_CACHE) must be a file", file=str(path))
        try:
            data = load_json_file(path, limit=MAX_CACHE_BYTES, what="weights hash cache")
        except InputError:
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def key(real_path: str) -> str:
        return real_path

    def get(self, real_path: str, size: int, mtime_ns: int) -> CachedHash | None:
        entry = self.entries.get(self.key(real_path))
        if not isinstance(entry, dict) or entry.get("size") != size \
                or entry.get("mtime_ns") != mtime_ns \
                or not isinstance(entry.get("sha256"), str) \
                or not isinstance(entry.get("fingerprint"), str):
            return None
        self.hits += 1
        return CachedHash(entry["sha256"], entry["fingerprint"])

    def put(self, real_path: str, size: int, mtime_ns: int, value: CachedHash) -> None:
        self.entries[self.key(real_path)] = {"size": size, "mtime_ns": mtime_ns,
                                             "sha256": value.sha256,
                                             "fingerprint": value.fingerprint}
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = self._read(self.path)   # keep what a concurrent run added
            merged.update(self.entries)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".hash-cache.")
            with os.fdopen(fd, "w") as handle:
                json.dump({"version": CACHE_VERSION, "entries": merged}, handle)
            os.replace(tmp, self.path)
        self.dirty = False
