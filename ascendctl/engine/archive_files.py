"""Read files out of an image archive on the jump host without loading it: the CANN
toolkit's version files, so that preflight can judge an image the nodes do not hold yet.

The layers are searched from the top one down (the first layer that has a path wins;
symlinked directories such as `ascend-toolkit/latest -> 8.5.1` are followed). One pass
over the archive, plain or gzip (`image_archive.scan_archive`) reads the headers of each
layer and keeps only what could answer a pattern: files under the toolkit prefix with a
pattern's file name (at most 1 MiB each), and symlinks on a pattern's directories; all
of it bounded. The answer is cached by the archive's path, size and mtime (next to the
weights hash cache), so a preflight or a no-op deploy does not read a 4 GB archive again.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ascendctl.engine.image_archive import FIELD, WHAT, scan_archive
from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import parse_json, read_input_bytes, shown
from ascendctl.inventory.inputtar import (
    member_name, members, open_tar, read_member, tar_errors,
)
from ascendctl.weights.cache import default_cache_path

CACHE_NAME = "engine-archive-files.json"
PREFIX = "usr/local/Ascend/"
MAX_FILE = 1 << 20
MAX_LAYER_MEMBERS = 1_000_000      # a CANN toolkit layer has some 10^5
MAX_CANDIDATES = 256               # files kept per archive whose name fits a pattern
MAX_LINKS = 1024                   # symlinks on the directories of a pattern
MAX_ALIASES = 100_000              # paths those symlinks make
MAX_CACHE_BYTES = 16 << 20


def cache_path() -> Path:
    return default_cache_path().with_name(CACHE_NAME)


@dataclass
class LayerFiles:
    links: dict[str, str] = field(default_factory=dict)     # symlink -> its target
    files: dict[str, bytes] = field(default_factory=dict)   # candidate file -> content
    error: InputError | None = None                         # not a readable layer tar


class _Collector:
    """The layer visitor of scan_archive: keeps the candidates of one archive."""

    def __init__(self, where: str, patterns: Sequence[str]):
        self.where = where
        parts = [p.lstrip("/").split("/") for p in patterns]
        self.file_names = {p[-1] for p in parts}
        self.directories = {"/".join(p[:k]) for p in parts for k in range(1, len(p))}
        self.files = self.links = 0

    def __call__(self, name: str, stream: IO[bytes], seekable: bool) -> LayerFiles:
        found = LayerFiles()
        what = f"{WHAT} layer {shown(name)}"
        try:
            with tar_errors(self.where, what, FIELD):
                inner = open_tar(stream, seekable=seekable)
                for member in members(inner, limit=MAX_LAYER_MEMBERS, file=self.where,
                                      what=what, field=FIELD, keep=False):
                    self._collect(inner, member, found, what)
        except InputError as err:
            found.error = err
        return found

    def _collect(self, inner: tarfile.TarFile, member: tarfile.TarInfo, found: LayerFiles,
                 what: str) -> None:
        path = member_name(member.name, file=self.where, what=what, field=FIELD)
        if not path.startswith(PREFIX):
            return
        if member.issym():
            if path not in found.links and \
                    any(fnmatch.fnmatchcase(path, d) for d in self.directories):
                self.links += 1
                if self.links > MAX_LINKS:
                    raise InputError(f"{what} has more than {MAX_LINKS} symlinks on the "
                                     "toolkit's directories", file=self.where, field=FIELD)
                found.links[path] = member.linkname
        elif member.isfile() and member.size <= MAX_FILE and path not in found.files and \
                any(fnmatch.fnmatchcase(posixpath.basename(path), f) for f in self.file_names):
            self.files += 1
            if self.files > MAX_CANDIDATES:
                raise InputError(f"{what} has more than {MAX_CANDIDATES} files named like the "
                                 "toolkit's version files", file=self.where, field=FIELD)
            found.files[path] = read_member(inner, member, limit=MAX_FILE, file=self.where,
                                            what=f"{what} file {shown(path)}", field=FIELD)


def _aliases(files: Mapping[str, object], links: Mapping[str, str], *,
             where: str) -> dict[str, str]:
    """Every path a file can be reached by (through symlinked directories, two levels
    deep: `latest -> 8.5.1`, `latest/x86_64-linux -> ../8.5.1/x86_64-linux`) -> its name."""
    names = {name: name for name in files}
    targets = {}
    for link, target in links.items():
        base = target.lstrip("/") if target.startswith("/") else \
            posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
        targets[link] = base.rstrip("/")
    for _ in range(2):
        under: dict[str, list[str]] = {}              # directory -> the paths below it
        for alias in names:
            head = alias
            while "/" in head:
                head = head.rsplit("/", 1)[0]
                under.setdefault(head, []).append(alias)
        for link, base in targets.items():
            for alias in under.get(base, ()):
                names.setdefault(link + alias[len(base):], names[alias])
            if len(names) > MAX_ALIASES:
                raise InputError(f"{WHAT}: the toolkit's symlinks lead to more than "
                                 f"{MAX_ALIASES} paths", file=where, field=FIELD)
    return names


def read_archive_files(archive: str | os.PathLike[str],
                       patterns: Sequence[str]) -> dict[str, str]:
    """{pattern-matched path (absolute): text} for the files of a docker-archive (plain
    or gzip) that match PATTERNS (absolute, `*` allowed), searched top layer first."""
    where = str(Path(os.path.expanduser(str(archive))))
    scan = scan_archive(archive, visit=_Collector(where, patterns))
    links: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for layer in reversed(scan.image.layers):                  # the top layer first
        found = scan.visited.get(layer)
        if not isinstance(found, LayerFiles):
            raise InputError(f"{WHAT} layer {shown(layer)} is not a tar", file=where,
                             field=FIELD)
        if found.error is not None:
            raise found.error
        for name, target in found.links.items():
            links.setdefault(name, target)
        for name, data in found.files.items():
            files.setdefault(name, data)
    names = _aliases(files, links, where=where)
    result: dict[str, str] = {}
    for pattern in patterns:
        match = next((alias for alias in sorted(names)
                      if fnmatch.fnmatchcase(alias, pattern.lstrip("/"))), None)
        if match is not None:
            result["/" + match] = files[names[match]].decode("utf-8", "replace")
    return result


def _cache_entries(cache: Path) -> dict[str, dict[str, str]]:
    """The cache file's entries; anything unreadable or malformed counts as empty."""
    try:
        data = parse_json(read_input_bytes(cache, limit=MAX_CACHE_BYTES), file=str(cache),
                          max_bytes=MAX_CACHE_BYTES)
    except InputError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: value for key, value in data.items()
            if isinstance(value, dict) and all(isinstance(v, str) for v in value.values())}


def _cached_path(key: str) -> str | None:
    try:
        path = json.loads(key)[0]
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return path if isinstance(path, str) else None


def cached_archive_files(archive: str | os.PathLike[str], patterns: Sequence[str],
                         *, cache: Path | None = None) -> dict[str, str]:
    """read_archive_files through the cache (path, size, mtime, patterns)."""
    path = Path(os.path.expanduser(str(archive)))
    try:
        st = os.stat(path)
    except OSError:
        return read_archive_files(path, patterns)          # names the problem
    key = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, list(patterns)])
    cache = cache or cache_path()
    entries = _cache_entries(cache)
    if key in entries:
        return dict(entries[key])
    found = read_archive_files(path, patterns)
    entries = {k: v for k, v in entries.items() if _cached_path(k) != str(path.resolve())}
    entries[key] = found
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, cache)
    except OSError:
        pass
    return found
