"""The engine's identity: what makes two releases run the same engine or not, and the
readers of what it is computed from on this machine.

Each kind computes its own (ascendctl/engine/kinds/): a container is its image ID, the
sha256 of the image's config JSON, read from an archive without loading anything
(`manifest.json` → `Config` → sha256 of that member) or reported by the nodes; a venv is
a hash over the wheelhouse's content (sorted file names with their sha256), the node
Python that builds it and the packages asked for; a host engine is the executable's name.

A changed identity is a new release (`release_component()` goes into the release id).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from ascendctl.errors import AscendctlError, InputError

HEX = frozenset("0123456789abcdef")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TAR_BLOCK = 512


class EngineError(AscendctlError):
    """The engine is not where a release needs it (missing or different on a node)."""


@dataclass(frozen=True)
class EngineIdentity:
    kind: str                 # the engine kind's name
    id: str                   # e.g. host:<command> | sha256:<hex> | venv:<hex>
    short: str = field(compare=False)   # a short form for names (history, messages)
    detail: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def release_component(self) -> str:
        """The line the release planner hashes into the release id."""
        return f"engine {self.kind} {self.id}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "short": self.short, **self.detail}


def normalise_image_id(text: str) -> str:
    """`podman image inspect --format {{.Id}}` prints bare hex, docker `sha256:<hex>`."""
    value = text.strip().lower().removeprefix("sha256:")
    if len(value) != 64 or not set(value) <= HEX:
        raise ValueError(f"not an image ID: {text.strip()[:80]!r}")
    return "sha256:" + value


# -- image archives --------------------------------------------------------------------

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

    def to_dict(self) -> dict[str, Any]:
        return {"archive": str(self.path), "bytes": self.size, "image_id": self.image_id,
                "repo_tags": list(self.repo_tags), "layers": len(self.layers),
                "labels": self.labels}


def _archive_error(path: Path, message: str) -> InputError:
    return InputError(f"image archive {message}", file=str(path), field="engine.archive")


def _open_tar(path: Path, handle: BinaryIO) -> tuple[tarfile.TarFile, bool]:
    magic = handle.read(4)
    handle.seek(0)
    if magic.startswith(ZSTD_MAGIC):
        raise _archive_error(path, "is zstd-compressed: decompress it (`zstd -d`); docker "
                                   "cannot load zstd archives")
    if magic.startswith(GZIP_MAGIC):
        return tarfile.open(fileobj=gzip.GzipFile(fileobj=handle), mode="r|"), True
    return tarfile.open(fileobj=handle, mode="r:"), False


def read_archive(path: str | os.PathLike[str], *, verify_layers: bool = False) -> ArchiveImage:
    """The image a `docker save` / `podman save` archive holds, without loading it.

    Always checked: a readable tar that is not truncated, one image in manifest.json,
    its config and layers present, the config's digest equal to its name when the name
    carries one. `verify_layers`: also the sha256 of every layer against the config's
    rootfs.diff_ids (reads the whole archive)."""
    path = Path(os.path.expanduser(str(path)))
    try:
        size = path.stat().st_size
        handle = open(path, "rb")
    except OSError as err:
        raise _archive_error(path, f"cannot be read: {err.strerror}") from None
    with handle:
        try:
            tar, compressed = _open_tar(path, handle)
            if compressed:
                return _read_stream(path, size, tar, verify_layers)
            return _read_seekable(path, size, tar, handle, verify_layers)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
            raise _archive_error(path, f"is not a readable tar (truncated or corrupt): "
                                       f"{err}") from None


def _read_seekable(path: Path, size: int, tar: tarfile.TarFile, handle: BinaryIO,
                   verify_layers: bool) -> ArchiveImage:
    members = {}
    end = 0
    for member in tar:
        if member.isfile() and member.offset_data + member.size > size:
            raise _archive_error(path, f"is truncated: {member.name} needs "
                                       f"{member.offset_data + member.size} bytes, the "
                                       f"file has {size}")
        members[member.name] = member
        end = member.offset_data + -(-member.size // TAR_BLOCK) * TAR_BLOCK
    handle.seek(end)
    if handle.read(2 * TAR_BLOCK) != bytes(2 * TAR_BLOCK):
        raise _archive_error(path, "is truncated: the tar's end-of-archive blocks are missing")

    def read(name: str) -> bytes:
        member = members.get(name)
        if member is None or not member.isfile():
            raise _archive_error(path, f"has no {name}")
        extracted = tar.extractfile(member)
        assert extracted is not None
        return extracted.read()

    manifest, config_name, config = _manifest_and_config(path, read)
    image = _image(path, size, manifest, config_name, config)
    for layer in image.layers:
        if layer not in members:
            raise _archive_error(path, f"lacks layer {layer} named in manifest.json")
    if verify_layers:
        for layer, diff_id in zip(image.layers, image.diff_ids):
            extracted = tar.extractfile(members[layer])
            assert extracted is not None
            _check_layer(path, layer, extracted, diff_id)
    return image


def _read_stream(path: Path, size: int, tar: tarfile.TarFile,
                 verify_layers: bool) -> ArchiveImage:
    """A gzip archive can only be read in order: keep the small members, hash layers as
    they pass (their diff_ids are known only at the end, from the config)."""
    small: dict[str, bytes] = {}
    digests: dict[str, str] = {}
    for member in tar:
        extracted = tar.extractfile(member) if member.isfile() else None
        if extracted is None:
            continue
        if member.name.endswith(".json") or member.size < (1 << 20):
            data = extracted.read()
            small[member.name] = data
            digests[member.name] = "sha256:" + hashlib.sha256(data).hexdigest()
        else:
            digest = hashlib.sha256()
            for block in iter(lambda: extracted.read(1 << 20), b""):  # noqa: B023 (used here)
                digest.update(block)
            digests[member.name] = "sha256:" + digest.hexdigest()

    def read(name: str) -> bytes:
        if name not in small:
            raise _archive_error(path, f"has no {name}")
        return small[name]

    manifest, config_name, config = _manifest_and_config(path, read)
    image = _image(path, size, manifest, config_name, config)
    for layer, diff_id in zip(image.layers, image.diff_ids):
        if layer not in digests:
            raise _archive_error(path, f"lacks layer {layer} named in manifest.json")
        if verify_layers and digests[layer] != diff_id:
            raise _archive_error(path, f"layer {layer} has sha256 {digests[layer]}, the "
                                       f"config says {diff_id} (corrupt, or compressed)")
    return image


def _manifest_and_config(path: Path, read) -> tuple[dict, str, bytes]:
    try:
        manifest = json.loads(read("manifest.json"))
    except ValueError as err:
        raise _archive_error(path, f"manifest.json is not JSON: {err}") from None
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        count = len(manifest) if isinstance(manifest, list) else "no"
        raise _archive_error(path, f"must hold exactly one image (manifest.json lists {count})")
    entry = manifest[0]
    config_name = entry.get("Config")
    if not isinstance(config_name, str):
        raise _archive_error(path, "manifest.json has no Config")
    return entry, config_name, read(config_name)


def _image(path: Path, size: int, entry: dict, config_name: str, config: bytes) -> ArchiveImage:
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    named = Path(config_name).name.removesuffix(".json")
    if len(named) == 64 and set(named) <= HEX and named != image_id[7:]:
        raise _archive_error(path, f"config {config_name} has sha256 {image_id[7:]}: corrupt")
    try:
        parsed = json.loads(config)
    except ValueError as err:
        raise _archive_error(path, f"config {config_name} is not JSON: {err}") from None
    layers = tuple(str(x) for x in entry.get("Layers") or ())
    diff_ids = tuple(str(x) for x in (parsed.get("rootfs") or {}).get("diff_ids") or ())
    if len(diff_ids) != len(layers):
        raise _archive_error(path, f"lists {len(layers)} layers but its config "
                                   f"{len(diff_ids)} diff_ids")
    labels = (parsed.get("config") or {}).get("Labels") or {}
    return ArchiveImage(path=path, size=size, image_id=image_id, config_name=config_name,
                        repo_tags=tuple(str(t) for t in entry.get("RepoTags") or ()),
                        layers=layers, diff_ids=diff_ids,
                        labels={str(k): str(v) for k, v in labels.items()})


def _check_layer(path: Path, name: str, stream: IO[bytes], diff_id: str) -> None:
    head = stream.read(2)
    digest = hashlib.sha256()
    if head == GZIP_MAGIC:
        raise _archive_error(path, f"layer {name} is compressed; verify it after loading")
    digest.update(head)
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
    if "sha256:" + digest.hexdigest() != diff_id:
        raise _archive_error(path, f"layer {name} does not match its diff_id {diff_id}: corrupt")


# -- wheelhouses -----------------------------------------------------------------------

@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    files: tuple[Any, ...]              # weights.manifest.FileEntry per wheel, by name
    digest: str                         # sha256 over "name sha256" lines

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def read_wheelhouse(path: str | os.PathLike[str], *, cache: Any = None) -> Wheelhouse:
    """Every *.whl in the directory, hashed (through the weights hash cache)."""
    from ascendctl.weights.manifest import build_manifest

    root = Path(os.path.expanduser(str(path)))
    if not root.is_dir():
        raise InputError("is not a directory on this machine", file=str(root),
                         field="engine.wheelhouse")
    names = sorted(p.name for p in root.iterdir() if p.name.endswith(".whl") and p.is_file())
    if not names:
        raise InputError("holds no wheels (*.whl)", file=str(root), field="engine.wheelhouse")
    manifest = build_manifest(root, cache=cache, files=names)
    return Wheelhouse(root, manifest.files, wheelhouse_digest(
        (f.path, f.sha256) for f in manifest.files))


def wheelhouse_digest(entries) -> str:
    lines = "".join(f"{name} {sha}\n" for name, sha in sorted(entries))
    return hashlib.sha256(lines.encode()).hexdigest()
