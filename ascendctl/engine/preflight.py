"""What preflight needs to know about the inventory's engine: the gather parameters of the
engine facts (ascendctl/facts/engine.py) and the `EngineExpectation` the engine checks
(ascendctl/checks/engine.py) compare the facts with — both the engine kind's.

Read on this machine only (an archive's image ID and CANN files, a wheelhouse's package
versions). A problem with them is reported by a check, not raised: preflight still
judges everything else.
"""

from __future__ import annotations

from typing import Any

from ascendctl.engine.expectation import EngineExpectation
from ascendctl.engine.kinds import kind_of
from ascendctl.inventory import Inventory


def engine_gather_params(inv: Inventory) -> dict[str, Any]:
    """GatherParams fields for the engine (a container's runtime and images, a venv's
    Python)."""
    return kind_of(inv.engine).gather_params(inv)


def engine_expectation(inv: Inventory, *, allow_own: bool = True) -> EngineExpectation:
    kind = kind_of(inv.engine)
    return EngineExpectation(kind=kind.name, allow_own=allow_own, **kind.expectation(inv))
