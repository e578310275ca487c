"""`model.safetensors.index.json`: read it safely, and write one per node.

vLLM's default loader globs `*.safetensors` and keeps the files the index names; from
0.26 an index naming a file that is not there is a FileNotFoundError. A node that holds
only its stage's files therefore needs an index listing exactly those files.
"""

from __future__ import annotations

import json
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.weights.paths import check_relative, json_line_of, resolve_inside

INDEX_NAME = "model.safetensors.index.json"


def read_index(root: Path) -> dict | None:
    """The validated index of a model directory, or None when it has none.

    Every file the weight map names must be a relative path that stays inside `root`
    (after symlinks) and must exist."""
    path = Path(root) / INDEX_NAME
    if not path.exists():
        return None
    where = str(path)
    resolve_inside(root, INDEX_NAME, where=where)
    from ascendctl.inventory.inputfile import parse_json, read_input_text

    text = read_input_text(path, limit=256 << 20, what="weights index")
    data = parse_json(text, file=where, what="weights index")
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise InputError("needs a `weight_map` object", file=where, field="weight_map")
    weight_map: dict[str, str] = {}
    checked: dict[str, str] = {}
    for tensor, name in data["weight_map"].items():
        field = f"weight_map.{tensor}"
        line = json_line_of(text, tensor)
        if not isinstance(name, str):
            raise InputError("file name must be a string", file=where, line=line, field=field)
        if name not in checked:
            rel = check_relative(name, where=where, field=field, line=line)
            target = resolve_inside(root, rel, where=where, field=field, line=line)
            if not target.is_file():
                raise InputError(f"names {name!r}, which is not in the model directory",
                                 file=where, line=line, field=field)
            checked[name] = rel
        weight_map[tensor] = checked[name]
    metadata = data.get("metadata")
    return {"metadata": metadata if isinstance(metadata, dict) else {},
            "weight_map": weight_map}


def node_index(metadata: dict, weight_map: dict[str, str], total_size: int) -> dict:
    """A per-node index: the original metadata with the local total, the local tensors."""
    meta = dict(metadata)
    meta["total_size"] = total_size
    return {"metadata": meta, "weight_map": dict(sorted(weight_map.items()))}


def dumps_index(index: dict) -> str:
    return json.dumps(index, indent=2) + "\n"
