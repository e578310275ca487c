"""The safetensors container, read and written without the library (dtype-agnostic).

Format: 8-byte little-endian header length N, N bytes of JSON header
(`{"__metadata__": {...}, "<tensor>": {"dtype", "shape", "data_offsets": [begin, end]}}`,
offsets relative to the end of the header), then the raw tensor bytes, contiguous.
Copying a tensor is copying its byte range, so bf16 and fp8 need no numeric library.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import open_input_file, parse_json, shown

# the safetensors library's own limit (MAX_HEADER_SIZE = 100_000_000 in its tensor.rs)
MAX_HEADER = 100_000_000
WHAT = "safetensors file"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int      # relative to data start
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    data_start: int
    metadata: dict[str, str] | None
    tensors: tuple[TensorInfo, ...]    # in file order

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """The header of the safetensors file PATH, checked the way the library checks it: a
    regular file; the declared header length within the file and at most MAX_HEADER (so a
    lying length costs nothing); a JSON object of tensors and an optional
    `__metadata__` of strings; offsets that tile the data exactly to the end of the file."""
    path = Path(path)
    where = str(path)
    with open_input_file(path, what=WHAT) as handle:
        try:
            file_size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise InputError("too short for a safetensors file", file=where)
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER:
                raise InputError(f"safetensors header of {length} bytes is larger than the "
                                 f"format allows ({MAX_HEADER})", file=where)
            if length > file_size - 8:
                raise InputError(f"safetensors header of {length} bytes is longer than the "
                                 f"file ({file_size} bytes): truncated?", file=where)
            raw = handle.read(length)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror}", file=where) from None
    if len(raw) != length:
        raise InputError("truncated safetensors header", file=where)
    return _parse_header(path, raw, file_size)


def _parse_header(path: Path, raw: bytes, file_size: int) -> SafetensorsHeader:
    where = str(path)
    # a header is one flat object of tensors: deep nesting is refused, not recursed into
    header = parse_json(raw, file=where, what="safetensors header", max_depth=8,
                        max_bytes=MAX_HEADER)
    if not isinstance(header, dict):
        raise InputError("safetensors header is not an object", file=where)
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise InputError("__metadata__ must map names to strings", file=where,
                         field="__metadata__")
    tensors = [_tensor(name, info, where) for name, info in header.items()]
    tensors.sort(key=lambda t: (t.begin, t.end))
    data_start = 8 + len(raw)
    position = 0
    for tensor in tensors:
        if tensor.begin != position or tensor.end < tensor.begin:
            raise InputError(f"tensor {shown(tensor.name)}: data offsets {tensor.begin}.."
                             f"{tensor.end} are not contiguous", file=where)
        position = tensor.end
    if data_start + position != file_size:
        raise InputError(f"file is {file_size} bytes, the header describes "
                         f"{data_start + position}", file=where)
    return SafetensorsHeader(path, data_start, metadata, tuple(tensors))


def _tensor(name: str, info: object, where: str) -> TensorInfo:
    def natural(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    if isinstance(info, dict):
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if isinstance(dtype, str) and isinstance(shape, list) and all(map(natural, shape)) \
                and isinstance(offsets, list) and len(offsets) == 2 \
                and all(map(natural, offsets)):
            return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])
    raise InputError(f"tensor {shown(name)}: bad header entry (needs dtype, shape and "
                     "data_offsets [begin, end])", file=where)


def write_subset(source: SafetensorsHeader, names: list[str], out: str | os.PathLike[str],
                 metadata: dict[str, str] | None = None) -> None:
    """Write a new safetensors file holding `names` of `source`, byte ranges copied as-is.

    Written to a temporary name and renamed, so a crash never leaves a half file."""
    wanted = set(names)
    chosen = [t for t in source.tensors if t.name in wanted]
    missing = wanted - {t.name for t in chosen}
    if missing:
        raise ValueError(f"{source.path}: no tensors {sorted(missing)[:3]}")
    header: dict = {}
    meta = source.metadata if metadata is None else metadata
    if meta is not None:
        header["__metadata__"] = meta
    position = 0
    for tensor in chosen:
        header[tensor.name] = {"dtype": tensor.dtype, "shape": list(tensor.shape),
                               "data_offsets": [position, position + tensor.nbytes]}
        position += tensor.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)   # data starts 8-byte aligned, like the library
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with open(source.path, "rb") as src, open(tmp, "wb") as dst:
        dst.write(struct.pack("<Q", len(encoded)))
        dst.write(encoded)
        for tensor in chosen:
            _copy_range(src, dst, source.data_start + tensor.begin, tensor.nbytes)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, out)


def _copy_range(src, dst, offset: int, length: int) -> None:
    src.seek(offset)
    remaining = length
    while remaining > 0:
        block = src.read(min(8 << 20, remaining))
        if not block:
            raise OSError(f"unexpected end of {src.name}")
        dst.write(block)
        remaining -= len(block)


def tensor_bytes(header: SafetensorsHeader, name: str) -> bytes:
    for tensor in header.tensors:
        if tensor.name == name:
            with open(header.path, "rb") as handle:
                handle.seek(header.data_start + tensor.begin)
                return handle.read(tensor.nbytes)
    raise KeyError(name)
