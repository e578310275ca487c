"""How much disk a node needs for the model, measured on the jump host."""

from __future__ import annotations

import os
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.weights.manifest import list_model_files

GIB = 1 << 30


def model_source_bytes(inv: Inventory) -> int | None:
    """Bytes of the model files under `model.source` (what `weights push` sends: the
    regular files, dot-entries excluded, as in a weights manifest); None when the
    inventory uses `model.path` (weights already on the nodes: nothing is copied)."""
    if inv.model.source is None:
        return None

    root = Path(os.path.expanduser(inv.model.source))
    if not root.is_dir():
        raise InputError(f"{root} is not a directory on this machine (the disk check needs "
                         "the model's size)", file=str(inv.path), field="model.source")
    return sum((root / rel).stat().st_size for rel in list_model_files(root))
