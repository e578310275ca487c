"""How every command reads the inventory: the file parsed and validated section by section
(ascendctl.inventory), the `engine:` section through the engine kinds (ascendctl.engine.kinds
registers them with the loader when imported), and the serving options checked against the
pinned release (ascendctl.drift), so an option the engine would refuse 20 minutes into a
load is refused here, at its line.

The composition root of the loaders: it sits above every package they use, so none of
them has to import another's package back. Library users load inventories through it too.
"""

from __future__ import annotations

import os

import ascendctl.engine.kinds  # noqa: F401  (registers the engine kinds with the loader)
from ascendctl.drift import refuse_option_drift
from ascendctl.inventory import Inventory
from ascendctl.inventory import load_inventory as parse_inventory
from ascendctl.pd.inventory import refuse_pd_rules


def load_inventory(path: str | os.PathLike[str], *, check_files: bool = True) -> Inventory:
    """The inventory at PATH, validated as every command validates it (InputError naming
    file, line and field otherwise)."""
    inventory = parse_inventory(path, check_files=check_files)
    refuse_option_drift(inventory)
    refuse_pd_rules(inventory)
    return inventory
