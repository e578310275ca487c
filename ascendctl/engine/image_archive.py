"""The image a `docker save` / `podman save` archive holds, read without loading it, in
one pass and with every cost bounded (the readers of `ascendctl.inventory.inputtar`).

    manifest.json          [{"Config": "<config>", "RepoTags": [...], "Layers": [...]}]
    <config>               the image config JSON; its sha256 is the image ID
    <layer> ...            one tar per layer, lowest first

Docker 25+ writes the same manifest.json next to an OCI layout (`index.json`, `blobs/`);
podman adds legacy `<id>/layer.tar` symlinks to its layer files, and docker before 25
makes a repeated layer a symlink to its first copy: a layer named in the manifest may be
a link to another layer it names, nothing else. An OCI layout without manifest.json
(`podman save --format oci-archive`) is refused with what to write instead.

A gzip archive can only be read in order and manifest.json comes last, so the pass keeps
every small member that looks like JSON (bounded in size and in total), hashes the others
when asked, and hands each one to an optional visitor (archive_files reads layer headers
that way); what is a layer is known only at the end.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import open_input_file, parse_json, read_capped, shown
from ascendctl.inventory.inputtar import (
    compression, link_target, member_name, members, open_tar, stream_digest,
    tar_errors,
)

FIELD = "engine.archive"
WHAT = "image archive"
MAX_MEMBERS = 4096                 # a docker save of 127 layers has about 520
MAX_JSON_BYTES = 4 << 20           # manifest.json, one image config
MAX_KEPT_BYTES = 64 << 20          # every JSON-looking member of one archive
MAX_TAGS = 1024
TAR_BLOCK = 512
PEEK = 16
HEX = frozenset("0123456789abcdef")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
OCI_MARKERS = ("index.json", "oci-layout")

# (member name, its data, seekable) -> what archive_files wants to know about a layer
LayerVisitor = Callable[[str, IO[bytes], bool], Any]


@dataclass(frozen=True)
class ArchiveImage:
    path: Path
    size: int
    image_id: str                       # sha256:<hex> of the config
    config_name: str                    # member name of the config in the archive
    repo_tags: tuple[str, ...]
    layers: tuple[str, ...]             # member names, lowest first
    diff_ids: tuple[str, ...]           # from the config: sha256 of each uncompressed layer
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    config: bytes = field(default=b"", compare=False, repr=False)   # the config's bytes
    layer_sizes: tuple[int, ...] = field(default=(), compare=False)  # bytes of each layer

    def to_dict(self) -> dict[str, Any]:
        return {"archive": str(self.path), "bytes": self.size, "image_id": self.image_id,
                "repo_tags": list(self.repo_tags), "layers": len(self.layers),
                "labels": self.labels}


@dataclass
class ArchiveScan:
    image: ArchiveImage
    visited: dict[str, Any]             # layer name (as in the manifest) -> visitor result


@dataclass
class _Entry:
    member: tarfile.TarInfo
    target: str | None = None           # normalised link target
    data: bytes | None = None           # kept JSON-looking content
    digest: str | None = None
    visited: Any = None


class _Pass:
    """What one pass over the outer tar records, member by member."""

    def __init__(self, path: Path, size: int, seekable: bool, verify_layers: bool,
                 visit: LayerVisitor | None):
        self.path, self.where, self.size, self.seekable = path, str(path), size, seekable
        self.verify_layers, self.visit = verify_layers, visit
        self.entries: dict[str, _Entry] = {}
        self.kept = 0
        self.end = 0

    def error(self, message: str) -> InputError:
        return InputError(f"{WHAT} {message}", file=self.where, field=FIELD)

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = member_name(member.name, file=self.where, what=WHAT, field=FIELD)
        if name == "." and member.isdir():
            return
        if self.seekable:
            if member.isfile() and member.offset_data + member.size > self.size:
                raise self.error(f"is truncated: {shown(name)} needs "
                                 f"{member.offset_data + member.size} bytes, the file has "
                                 f"{self.size}")
            self.end = member.offset_data + (-(-member.size // TAR_BLOCK) * TAR_BLOCK
                                             if member.isfile() else 0)
        previous = self.entries.get(name)
        if previous is not None and not (previous.member.isdir() and member.isdir()):
            raise self.error(f"holds member {shown(name)} twice")
        entry = self.entries[name] = _Entry(member)
        if member.issym() or member.islnk():
            entry.target = link_target(member, name, file=self.where, what=WHAT, field=FIELD)
        elif member.isfile():
            if name in ("manifest.json", "index.json") and member.size > MAX_JSON_BYTES:
                raise self.error(f"member {name} is {member.size} bytes (limit "
                                 f"{MAX_JSON_BYTES})")
            self._data(tar, name, entry)

    def _data(self, tar: tarfile.TarFile, name: str, entry: _Entry) -> None:
        stream = tar.extractfile(entry.member)
        assert stream is not None                        # a regular file
        head = stream.read(PEEK)
        if head.lstrip()[:1] in (b"{", b"[", b""):         # JSON (layers are tars)
            if entry.member.size > MAX_JSON_BYTES:
                raise self.error(f"member {shown(name)} looks like JSON but is "
                                 f"{entry.member.size} bytes (limit {MAX_JSON_BYTES})")
            data = head + read_capped(stream, MAX_JSON_BYTES, file=self.where,
                                      what=f"{WHAT} member {shown(name)}", field=FIELD)
            self.kept += len(data)
            if self.kept > MAX_KEPT_BYTES:
                raise self.error(f"holds more than {MAX_KEPT_BYTES} bytes of JSON members")
            entry.data = data
            entry.digest = "sha256:" + hashlib.sha256(data).hexdigest()
            return
        if self.visit is not None:
            if self.seekable:
                stream.seek(0)
                entry.visited = self.visit(name, stream, True)
            else:
                entry.visited = self.visit(name, cast(IO[bytes], _Prefixed(head, stream)), False)
        elif self.verify_layers:
            entry.digest = stream_digest(stream, head)

    def check_end(self, handle: IO[bytes]) -> None:
        """The two zero blocks that end a tar: without them it was cut at a member."""
        handle.seek(self.end)
        if handle.read(2 * TAR_BLOCK) != bytes(2 * TAR_BLOCK):
            raise self.error("is truncated: the tar's end-of-archive blocks are missing")


class _Prefixed:
    """A stream that first returns the bytes already peeked from it."""

    def __init__(self, head: bytes, stream: IO[bytes]):
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(size)
        if size < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        if len(data) < size:
            data += self.stream.read(size - len(data))
        return data


def read_archive(path: str | os.PathLike[str], *, verify_layers: bool = False) -> ArchiveImage:
    """The image a `docker save` / `podman save` archive holds, without loading it.

    Always checked: a regular file that is a readable tar (not truncated, not corrupt,
    bounded), one image in manifest.json, its config and layers present, the config's
    digest equal to its name when the name carries one. `verify_layers`: also the sha256
    of every layer against the config's rootfs.diff_ids (reads the whole archive)."""
    return scan_archive(path, verify_layers=verify_layers).image


def scan_archive(path: str | os.PathLike[str], *, verify_layers: bool = False,
                 visit: LayerVisitor | None = None) -> ArchiveScan:
    """read_archive, and VISIT(name, stream, seekable) for every member that may be a
    layer, in the same pass; the results of the layers come back in `visited`."""
    if visit is not None and verify_layers:
        raise ValueError("a visited layer cannot be verified in the same pass")
    path = Path(os.path.expanduser(str(path)))
    where = str(path)
    with open_input_file(path, what=WHAT, field=FIELD) as handle:
        size = os.fstat(handle.fileno()).st_size
        with tar_errors(where, WHAT, FIELD):
            kind = compression(handle.read(4))
            handle.seek(0)
            if kind == "zstd":
                raise InputError(f"{WHAT} is zstd-compressed: decompress it (`zstd -d`); "
                                 "docker cannot load zstd archives", file=where, field=FIELD)
            scan = _Pass(path, size, kind is None, verify_layers, visit)
            tar = open_tar(handle, gzipped=kind == "gzip")
            for member in members(tar, limit=MAX_MEMBERS, file=where, what=WHAT,
                                  field=FIELD):
                scan.add(tar, member)
            if scan.seekable:
                scan.check_end(handle)
    return _image(scan)


def _image(scan: _Pass) -> ArchiveScan:
    entries = scan.entries
    if "manifest.json" not in entries:
        if any(name in entries for name in OCI_MARKERS):
            raise scan.error("is an OCI image layout without manifest.json: save it as a "
                             "docker-archive (`docker save`, or `podman save --format "
                             "docker-archive`)")
        raise scan.error("has no manifest.json (not a `docker save` / `podman save` archive)")
    manifest = parse_json(_json_member(scan, "manifest.json", "manifest.json", "a JSON list"),
                          file=scan.where, what="manifest.json", max_bytes=MAX_JSON_BYTES,
                          field=FIELD, inside=True)
    entry = _manifest_entry(scan, manifest)
    config_name = _referenced(scan, entry.get("Config"), "Config")
    label = f"config {shown(config_name)}"
    config_bytes = _json_member(scan, config_name, label, "a JSON object")
    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    named = Path(config_name).name.removesuffix(".json")
    if len(named) == 64 and set(named) <= HEX and named != image_id[7:]:
        raise scan.error(f"{label} has sha256 {image_id[7:]}: corrupt")
    config = parse_json(config_bytes, file=scan.where, what=label,
                        max_bytes=MAX_JSON_BYTES, field=FIELD, inside=True)
    diff_ids, labels = _config_fields(scan, label, config)
    raw_layers = entry.get("Layers")
    if not isinstance(raw_layers, list):
        raise scan.error("manifest.json: Layers must be a list of member names")
    layers = tuple(_referenced(scan, item, f"Layers[{i}]") for i, item in enumerate(raw_layers))
    if len(diff_ids) != len(layers):
        raise scan.error(f"lists {len(layers)} layers but its config {len(diff_ids)} diff_ids")
    visited: dict[str, Any] = {}
    sizes = []
    for layer, diff_id in zip(layers, diff_ids):
        data = _layer_entry(scan, layer, set(layers))
        sizes.append(data.member.size)
        if scan.verify_layers and data.digest != diff_id:
            raise scan.error(f"layer {shown(layer)} does not match its diff_id {diff_id}: "
                             "corrupt (or compressed)")
        visited[layer] = data.visited
    tags = entry.get("RepoTags") or []
    if not isinstance(tags, list) or len(tags) > MAX_TAGS or \
            not all(isinstance(t, str) for t in tags):
        raise scan.error("manifest.json: RepoTags must be a list of image references")
    image = ArchiveImage(path=scan.path, size=scan.size, image_id=image_id,
                         config_name=config_name, repo_tags=tuple(tags), layers=layers,
                         diff_ids=diff_ids, labels=labels, config=config_bytes,
                         layer_sizes=tuple(sizes))
    return ArchiveScan(image, visited)


def _manifest_entry(scan: _Pass, manifest: Any) -> dict[str, Any]:
    if not isinstance(manifest, list) or len(manifest) != 1:
        count = len(manifest) if isinstance(manifest, list) else "no"
        raise scan.error(f"must hold exactly one image (manifest.json lists {count})")
    if not isinstance(manifest[0], dict):
        raise scan.error("manifest.json: the image entry must be an object")
    return manifest[0]


def _referenced(scan: _Pass, value: Any, key: str) -> str:
    """A member name manifest.json gives, normalised; absent members are refused."""
    if not isinstance(value, str) or not value:
        raise scan.error(f"manifest.json: {key} must be a member name")
    name = member_name(value, file=scan.where, what=f"{WHAT} manifest.json {key}:",
                       field=FIELD)
    if name not in scan.entries:
        what = "config" if key == "Config" else "layer"
        raise scan.error(f"lacks {what} {shown(value)} named in manifest.json")
    return name


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symlink to {shown(member.linkname)}"
    if member.islnk():
        return f"a hardlink to {shown(member.linkname)}"
    return "a directory" if member.isdir() else "a " + {
        tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
        tarfile.FIFOTYPE: "FIFO"}.get(member.type, "special member")


def _json_member(scan: _Pass, name: str, what: str, shape: str) -> bytes:
    entry = scan.entries[name]
    if not entry.member.isfile():
        raise scan.error(f"{what} is {_kind(entry.member)}, not a file")
    if entry.data is None:                    # did not start with { or [
        raise scan.error(f"{what} is not {shape}")
    return entry.data


def _layer_entry(scan: _Pass, name: str, layers: set[str]) -> _Entry:
    """The member holding layer NAME: itself, or the layer it links to (docker < 25
    writes a repeated layer as a symlink to its first copy)."""
    entry = scan.entries[name]
    if entry.target is not None:
        target = scan.entries.get(entry.target)
        if entry.target not in layers or target is None or not target.member.isfile():
            raise scan.error(f"layer {shown(name)} is {_kind(entry.member)}, which is not "
                             "another layer file of the archive")
        return target
    if not entry.member.isfile():
        raise scan.error(f"layer {shown(name)} is {_kind(entry.member)}, not a file")
    return entry


def _config_fields(scan: _Pass, what: str, config: Any) -> tuple[tuple[str, ...],
                                                                  dict[str, str]]:
    """rootfs.diff_ids and config.Labels, refused when they do not have the shape of an
    image config."""
    if not isinstance(config, dict):
        raise scan.error(f"{what} must be a JSON object, not {_json_type(config)}")
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or \
            not all(isinstance(d, str) and DIGEST_RE.fullmatch(d) for d in diff_ids):
        raise scan.error(f"{what}: rootfs.diff_ids must be a list of sha256:<hex> digests")
    settings = config.get("config")
    if settings is not None and not isinstance(settings, dict):
        raise scan.error(f"{what}: config must be an object, not {_json_type(settings)}")
    labels = (settings or {}).get("Labels") or {}
    if not isinstance(labels, dict) or \
            not all(isinstance(v, str) for v in labels.values()):
        raise scan.error(f"{what}: config.Labels must map names to strings")
    return tuple(diff_ids), dict(labels)


def _json_type(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), "an object")
