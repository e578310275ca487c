"""`model.safetensors.index.json`: read it safely, and write one per node.

vLLM's default loader globs `*.safetensors` and keeps the files the index names; from
0.26 an index naming a file that is not there is a FileNotFoundError. A node that holds
only its stage's files therefore needs an index listing exactly those files.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import non_regular, parse_json, read_input_text, shown
from ascendctl.weights.paths import check_relative, json_line_of, resolve_inside

INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX_BYTES = 256 << 20     # a weight map of a few hundred thousand tensors fits


def read_index(root: Path) -> dict | None:
    """The validated index of a model directory, or None when it has none.

    Every file the weight map names must be a relative path that stays inside `root`
    (after symlinks) and must exist."""
    path = Path(root) / INDEX_NAME
    if not os.path.lexists(path):
        return None
    where = str(path)
    resolve_inside(root, INDEX_NAME, where=where)
    text = read_input_text(path, limit=MAX_INDEX_BYTES, what="weights index")
    data = parse_json(text, file=where, what="weights index", max_bytes=MAX_INDEX_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise InputError("needs a `weight_map` object", file=where, field="weight_map")
    weight_map: dict[str, str] = {}
    checked: dict[str, str] = {}
    for tensor, name in data["weight_map"].items():
        if isinstance(name, str) and name in checked:
            weight_map[tensor] = checked[name]
            continue
        # looked up once per file named, not per entry (that would be quadratic)
        field, line = _entry_field(tensor), json_line_of(text, tensor)
        if not isinstance(name, str):
            raise InputError("file name must be a string", file=where, line=line, field=field)
        rel = check_relative(name, where=where, field=field, line=line)
        target = resolve_inside(root, rel, where=where, field=field, line=line)
        kind = non_regular(target)
        if kind == "missing":
            raise InputError(f"names {shown(name)}, which is not in the model directory",
                             file=where, line=line, field=field)
        if kind is not None:
            raise InputError(f"names {shown(name)}, which is {kind}, not a regular file",
                             file=where, line=line, field=field)
        checked[name] = weight_map[tensor] = rel
    metadata = data.get("metadata")
    return {"metadata": metadata if isinstance(metadata, dict) else {},
            "weight_map": weight_map}


def _entry_field(tensor: str) -> str:
    """weight_map.NAME for an error message; a long name or one with control characters
    shortened and quoted, so the message stays one short line."""
    if len(tensor) <= 120 and tensor.isprintable() and " " not in tensor:
        return f"weight_map.{tensor}"
    return f"weight_map[{shown(tensor)}]"


def node_index(metadata: dict, weight_map: dict[str, str], total_size: int) -> dict:
    """A per-node index: the original metadata with the local total, the local tensors."""
    meta = dict(metadata)
    meta["total_size"] = total_size
    return {"metadata": meta, "weight_map": dict(sorted(weight_map.items()))}
