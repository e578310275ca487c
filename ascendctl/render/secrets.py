"""Resolve the inventory's secret references on this machine (only when asked to)."""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.inventory.model import SecretRef

MAX_SECRET_FILE = 64 * 1024


def clean_secret(value: str, *, origin: str, refuse) -> str:
    """A key as CI systems and editors hand it over: one final newline (or CRLF) is
    dropped - a key file ending in a newline is normal. Anything else that is not a
    printable, space-free character is refused, and the value is never shown."""
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    if not value:
        raise refuse(f"{origin} is empty")
    if "\n" in value or "\r" in value:
        raise refuse(f"{origin} holds more than one line: it must hold the secret on one "
                     "line (the value is not shown)")
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in value):
        raise refuse(f"{origin} holds spaces or control characters (the value is not shown)")
    return value


def _resolve(inv: Inventory, ref: SecretRef, field: str) -> str:
    line = inv.source.line_of(("all", "vars", *field.split(".")))

    def error(message: str) -> InputError:
        return InputError(message, file=str(inv.path), line=line, field=field)

    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise error(f"environment variable {ref.env} is not set")
        return clean_secret(value, origin=f"environment variable {ref.env}", refuse=error)
    path = Path(os.path.expanduser(ref.file or ""))
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{ref.file} is not a regular file")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SECRET_FILE + 1)
    except OSError as err:
        raise error(f"cannot read {ref.file}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise error(f"{ref.file} is readable by others; chmod 600 it")
    if len(raw) > MAX_SECRET_FILE:
        raise error(f"{ref.file} is too large for a key")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{ref.file} is not UTF-8 text (the value is not shown)") from None
    return clean_secret(text, origin=ref.file or "", refuse=error)


def resolve_secrets(inv: Inventory) -> dict[str, str]:
    """{"api_key": ..., "health_token": ...} for the references the inventory makes."""
    found = {}
    if inv.serving.api_key is not None:
        found["api_key"] = _resolve(inv, inv.serving.api_key, "serving.api_key")
    if inv.serving.health.token is not None:
        found["health_token"] = _resolve(inv, inv.serving.health.token, "serving.health.token")
    return found
