"""Resolve the inventory's secret references on this machine (only when asked to)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory


def resolve_secrets(inv: Inventory) -> dict[str, str]:
    ref = inv.serving.api_key
    if ref is None:
        return {}
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise InputError(f"serving.api_key: environment variable {ref.env} is not set",
                             file=str(inv.path), field="serving.api_key")
        return {"api_key": value}
    path = Path(os.path.expanduser(ref.file or ""))
    try:
        mode = path.stat().st_mode
        value = path.read_text().strip()
    except OSError as err:
        raise InputError(f"serving.api_key: cannot read {ref.file}: {err.strerror}",
                         file=str(inv.path), field="serving.api_key") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"serving.api_key: {ref.file} is readable by others; chmod 600 it",
                         file=str(inv.path), field="serving.api_key")
    if not value or "\n" in value:
        raise InputError(f"serving.api_key: {ref.file} must hold the key on one line",
                         file=str(inv.path), field="serving.api_key")
    return {"api_key": value}
