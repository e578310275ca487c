"""Read files out of an image archive on the jump host without loading it: the CANN
toolkit's version files, so that preflight can judge an image the nodes do not hold yet.

The layers are searched from the top one down (the first layer that has a path wins;
symlinked directories such as `ascend-toolkit/latest -> 8.5.1` are followed). Only tar
headers are read, plus the few small files asked for. The answer is cached by the
archive's path, size and mtime (next to the weights hash cache), so a preflight or a
no-op deploy does not read a 4 GB archive again.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

CACHE_NAME = "engine-archive-files.json"
PREFIX = "usr/local/Ascend/"
MAX_FILE = 1 << 20


def cache_path() -> Path:
    from ascendctl.weights.cache import default_cache_path

    return default_cache_path().with_name(CACHE_NAME)


def _layers(outer: tarfile.TarFile) -> list[str]:
    member = outer.getmember("manifest.json")
    handle = outer.extractfile(member)
    assert handle is not None
    manifest = json.loads(handle.read())
    return [str(x) for x in manifest[0].get("Layers") or ()]


def _aliases(files: Mapping[str, object], links: Mapping[str, str]) -> dict[str, str]:
    """Every path a file can be reached by (through symlinked directories, two levels
    deep: `latest -> 8.5.1`, `latest/x86_64-linux -> ../8.5.1/x86_64-linux`) -> its name."""
    names = {name: name for name in files}
    targets = {}
    for link, target in links.items():
        base = target.lstrip("/") if target.startswith("/") else \
            posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
        targets[link] = base.rstrip("/")
    for _ in range(2):
        for link, base in targets.items():
            for alias, real in list(names.items()):
                if alias.startswith(base + "/"):
                    names.setdefault(link + alias[len(base):], real)
    return names


def read_archive_files(archive: str | os.PathLike[str],
                       patterns: Sequence[str]) -> dict[str, str]:
    """{pattern-matched path (absolute): text} for the files of an uncompressed
    docker-archive that match PATTERNS (absolute, `*` allowed), searched top layer first."""
    path = Path(archive)
    with tarfile.open(path, mode="r:") as outer:
        layers = _layers(outer)
        links: dict[str, str] = {}
        files: dict[str, tuple[str, tarfile.TarInfo]] = {}
        for layer in reversed(layers):                      # the top layer first
            handle = outer.extractfile(outer.getmember(layer))
            assert handle is not None
            with tarfile.open(fileobj=handle, mode="r:") as inner:
                for member in inner:
                    name = member.name.lstrip("./")
                    if not name.startswith(PREFIX):
                        continue
                    if member.issym():
                        links.setdefault(name.rstrip("/"), member.linkname)
                    elif member.isfile() and member.size <= MAX_FILE:
                        files.setdefault(name, (layer, member))
        found: dict[str, str] = {}
        names = _aliases(files, links)
        for pattern in patterns:
            match = next((alias for alias in sorted(names)
                          if fnmatch.fnmatchcase(alias, pattern.lstrip("/"))), None)
            if match is None:
                continue
            layer, member = files[names[match]]
            handle = outer.extractfile(outer.getmember(layer))
            assert handle is not None
            with tarfile.open(fileobj=handle, mode="r:") as inner:
                data = inner.extractfile(member)
                assert data is not None
                found["/" + match] = data.read().decode("utf-8", "replace")
    return found


def cached_archive_files(archive: str | os.PathLike[str], patterns: Sequence[str],
                         *, cache: Path | None = None) -> dict[str, str]:
    """read_archive_files through the cache (path, size, mtime, patterns)."""
    path = Path(archive)
    st = path.stat()
    key = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, list(patterns)])
    cache = cache or cache_path()
    try:
        entries = json.loads(cache.read_text())
    except (OSError, ValueError):
        entries = {}
    if not isinstance(entries, dict):
        entries = {}
    if key in entries and isinstance(entries[key], dict):
        return {str(k): str(v) for k, v in entries[key].items()}
    found = read_archive_files(path, patterns)
    entries = {k: v for k, v in entries.items() if json.loads(k)[0] != str(path.resolve())}
    entries[key] = found
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, cache)
    except OSError:
        pass
    return found
