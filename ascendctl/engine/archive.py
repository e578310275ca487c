"""Write a docker-archive (what `docker save` writes and both `docker load` and
`podman load` read) from directories, without a container runtime:

    manifest.json          [{"Config": "<id>.json", "RepoTags": [...], "Layers": [...]}]
    <id>.json              the image config; its sha256 is the image ID
    <diff_id>/layer.tar    one uncompressed tar per layer, lowest first

A layer tar is written once from its directory (deterministically: sorted names, the
files' own modes, owners and times) and can be reused by every image built on it, so
images that differ only in their config (a label) cost one copy of the layers each.
Overlay whiteouts in a layer directory (0:0 character devices, opaque directories)
become the archive's `.wh.` markers.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


@dataclass(frozen=True)
class LayerTar:
    path: Path
    diff_id: str         # sha256:<hex> of the tar
    size: int


class _HashingWriter:
    def __init__(self, handle):
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def _is_opaque(path: str) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _entries(directory: str, prefix: str = "",
             skip: frozenset[str] = frozenset()) -> Iterable[tuple[str, str]]:
    """(absolute path, name in the tar), depth first, sorted; the root itself and the
    names in SKIP (with everything under them) excluded."""
    for name in sorted(os.listdir(directory)):
        full, arc = os.path.join(directory, name), prefix + name
        if arc in skip:
            continue
        yield full, arc
        if os.path.isdir(full) and not os.path.islink(full):
            yield from _entries(full, arc + "/", skip)


def write_layer_tar(source: Path, dest: Path, skip: Iterable[str] = ()) -> LayerTar:
    """Tar SOURCE's content into DEST (atomically) and return its diff_id; SKIP: paths
    relative to SOURCE left out, with everything under them."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw:
        writer = _HashingWriter(raw)
        # stream mode ("w|") only writes; typeshed's _Fileobj also wants read/seek/tell
        with tarfile.open(fileobj=writer, mode="w|",  # type: ignore[call-overload]
                          format=tarfile.PAX_FORMAT) as tar:
            for full, arc in _entries(str(source), skip=frozenset(
                    path.strip("/") for path in skip)):
                st = os.lstat(full)
                if stat.S_ISSOCK(st.st_mode):
                    continue
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    head, _, base = arc.rpartition("/")
                    info = tarfile.TarInfo((head + "/" if head else "") + WHITEOUT_PREFIX + base)
                    info.mtime = int(st.st_mtime)
                    tar.addfile(info)
                    continue
                info = tar.gettarinfo(full, arcname=arc)
                info.uname = info.gname = ""
                if info.isreg():
                    with open(full, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
                if info.isdir() and _is_opaque(full):
                    marker = tarfile.TarInfo(f"{arc}/{OPAQUE_MARKER}")
                    marker.mtime = int(st.st_mtime)
                    tar.addfile(marker)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, dest)
    return LayerTar(dest, "sha256:" + writer.digest.hexdigest(), writer.size)


def image_config(diff_ids: Sequence[str], *, env: Sequence[str] = (),
                 labels: Mapping[str, str] | None = None, cmd: Sequence[str] = (),
                 entrypoint: Sequence[str] = (), workdir: str = "/",
                 architecture: str = "amd64", created: str = "1970-01-01T00:00:00Z") -> bytes:
    """A deterministic image config (same inputs, same bytes, same image ID)."""
    config = {
        "architecture": architecture, "os": "linux", "created": created,
        "config": {"Env": list(env), "Labels": dict(sorted((labels or {}).items())),
                   "WorkingDir": workdir, "Cmd": list(cmd) or None,
                   "Entrypoint": list(entrypoint) or None},
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": created, "created_by": "ascendctl archive writer"}
                    for _ in diff_ids],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def write_docker_archive(dest: Path, layers: Sequence[LayerTar], config: bytes,
                         repo_tags: Sequence[str]) -> str:
    """Write the archive atomically; return the image ID (sha256 of CONFIG)."""
    image_id = hashlib.sha256(config).hexdigest()
    declared = json.loads(config)["rootfs"]["diff_ids"]
    if declared != [layer.diff_id for layer in layers]:
        raise ValueError("the config's diff_ids do not match the layers")
    names = [f"{layer.diff_id.removeprefix('sha256:')}/layer.tar" for layer in layers]
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": list(repo_tags),
                            "Layers": names}], separators=(",", ":")).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen: set[str] = set()
        for layer, name in zip(layers, names):
            if name in seen:
                continue
            seen.add(name)
            directory = tarfile.TarInfo(name.rpartition("/")[0])
            directory.type, directory.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(directory)
            info = tarfile.TarInfo(name)
            info.size, info.mode = layer.size, 0o644
            with open(layer.path, "rb") as handle:
                tar.addfile(info, handle)
        _add_bytes(tar, f"{image_id}.json", config)
        _add_bytes(tar, "manifest.json", manifest)
    os.replace(tmp, dest)
    return "sha256:" + image_id


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
