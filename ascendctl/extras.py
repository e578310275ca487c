"""Optional dependencies (the `lab` and `bench` extras): a command that needs one says
which extra to install, in one line with exit 2, instead of an import traceback."""

from __future__ import annotations

import importlib.util

from ascendctl.errors import InputError

# extra -> the modules it provides (as imported)
EXTRAS: dict[str, tuple[str, ...]] = {
    "lab": ("tokenizers", "safetensors", "numpy"),
    "bench": ("ansible",),
}


def missing_modules(extra: str) -> list[str]:
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, what: str) -> None:
    """Raise InputError (exit 2) naming the extra when any of its modules is missing."""
    missing = missing_modules(extra)
    if missing:
        raise InputError(f"{what} needs the `{extra}` extra (missing: {', '.join(missing)}): "
                         f"pip install 'ascendctl[{extra}]'")
