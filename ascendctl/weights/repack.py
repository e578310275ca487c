"""Rewrite a safetensors file that mixes pipeline stages into one file per set of stages.

Tensor byte ranges are copied verbatim (any dtype, bf16 included). Each output is
checked twice: its header and offsets are re-read and every tensor's bytes compared
with the source, then the safetensors library must open it and see the same tensors
(dtype and shape). Outputs are deterministic, so a second run reuses them.
"""

from __future__ import annotations

import hashlib
import json

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ascendctl.errors import AscendctlError
from ascendctl.weights.manifest import FileEntry
from ascendctl.weights.safetensors_file import SafetensorsHeader, read_header, write_subset


@dataclass(frozen=True)
class RepackOutput:
    name: str                  # relative name in the node's model directory
    path: Path                 # where it was written on the jump host
    tensors: tuple[str, ...]
    stages: frozenset[int]


def stage_suffix(stages: frozenset[int]) -> str:
    return "pp" + "-".join(str(s) for s in sorted(stages))


def output_name(source_name: str, stages: frozenset[int]) -> str:
    path = PurePosixPath(source_name)
    stem = path.name[: -len(".safetensors")] if path.name.endswith(".safetensors") \
        else path.name
    return str(path.with_name(f"{stem}.{stage_suffix(stages)}.safetensors"))


def repack_file(header: SafetensorsHeader, entry: FileEntry,
                groups: dict[frozenset[int], list[str]], out_dir: Path) -> list[RepackOutput]:
    layout = {stage_suffix(s): sorted(t) for s, t in groups.items()}
    key = hashlib.sha256(json.dumps([entry.sha256, layout], sort_keys=True).encode())
    target = Path(out_dir) / key.hexdigest()[:24]
    done = target / "repack.json"
    outputs = [RepackOutput(output_name(entry.path, stages), target / output_name(entry.path,
                                                                                  stages),
                            tuple(t.name for t in header.tensors if t.name in set(names)),
                            stages)
               for stages, names in sorted(groups.items(), key=lambda kv: sorted(kv[0]))]
    if done.is_file() and all(o.path.is_file() for o in outputs):
        return outputs
    for out in outputs:
        out.path.parent.mkdir(parents=True, exist_ok=True)
        write_subset(header, list(out.tensors), out.path)
        check_output(header, out.path, out.tensors)
    done.write_text(json.dumps({"source": entry.path, "sha256": entry.sha256,
                                "outputs": layout}, indent=1))
    return outputs


def check_output(source: SafetensorsHeader, path: Path, tensors: tuple[str, ...]) -> None:
    """The output holds exactly `tensors`, byte-identical to the source, and loads."""
    out = read_header(path)
    if out.names() != list(tensors):
        raise AscendctlError(f"repack of {source.path} wrote {path} with tensors "
                             f"{out.names()[:3]}…, expected {list(tensors)[:3]}…")
    by_name = {t.name: t for t in source.tensors}
    with open(source.path, "rb") as src, open(path, "rb") as dst:
        for tensor in out.tensors:
            original = by_name[tensor.name]
            if (tensor.dtype, tensor.shape) != (original.dtype, original.shape):
                raise AscendctlError(f"repack: {tensor.name} changed dtype or shape in {path}")
            if _range_digest(src, source.data_start + original.begin, original.nbytes) != \
                    _range_digest(dst, out.data_start + tensor.begin, tensor.nbytes):
                raise AscendctlError(f"repack: {tensor.name} bytes differ in {path}")
    check_with_library(path, {by_name[t].name: by_name[t] for t in tensors})


def check_with_library(path: Path, expected: dict) -> None:
    """Open with the safetensors library (it validates the header and offsets itself)."""
    try:
        from safetensors import safe_open
    except ImportError as err:
        raise AscendctlError("--repack checks its output with the `safetensors` library: "
                             "pip install 'ascendctl[lab]' (or safetensors)") from err
    with safe_open(str(path), framework="numpy") as handle:
        keys = list(handle.keys())
        if sorted(keys) != sorted(expected):
            raise AscendctlError(f"safetensors sees {len(keys)} tensors in {path}, "
                                 f"expected {len(expected)}")
        for name in keys:
            piece = handle.get_slice(name)
            shape = tuple(piece.get_shape())
            if shape != expected[name].shape:
                raise AscendctlError(f"safetensors reads {name} in {path} with shape {shape}, "
                                     f"expected {expected[name].shape}")


def _range_digest(handle, offset: int, length: int) -> bytes:
    digest = hashlib.sha256()
    handle.seek(offset)
    remaining = length
    while remaining > 0:
        block = handle.read(min(8 << 20, remaining))
        if not block:
            break
        digest.update(block)
        remaining -= len(block)
    return digest.digest()


__all__ = ["RepackOutput", "repack_file", "output_name", "check_output"]
