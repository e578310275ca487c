"""Resolve the inventory's secret references on this machine (only when asked to)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.inventory.model import SecretRef


def _resolve(inv: Inventory, ref: SecretRef, field: str) -> str:
    line = inv.source.line_of(("all", "vars", *field.split(".")))

    def error(message: str) -> InputError:
        return InputError(message, file=str(inv.path), line=line, field=field)

    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise error(f"environment variable {ref.env} is not set")
        return value
    path = Path(os.path.expanduser(ref.file or ""))
    try:
        mode = path.stat().st_mode
        value = path.read_text().strip()
    except OSError as err:
        raise error(f"cannot read {ref.file}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise error(f"{ref.file} is readable by others; chmod 600 it")
    if not value or "\n" in value:
        raise error(f"{ref.file} must hold the secret on one line")
    return value


def resolve_secrets(inv: Inventory) -> dict[str, str]:
    """{"api_key": ..., "health_token": ...} for the references the inventory makes."""
    found = {}
    if inv.serving.api_key is not None:
        found["api_key"] = _resolve(inv, inv.serving.api_key, "serving.api_key")
    if inv.serving.health.token is not None:
        found["health_token"] = _resolve(inv, inv.serving.health.token,
                                         "serving.health.token")
    return found
