"""Resolve the inventory's secret references on this machine (only when asked to)."""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory


def clean_secret(value: str, *, origin: str, inv: Inventory) -> str:
    """A key as CI systems and editors hand it over: one final newline (or CRLF) is
    dropped - a key file ending in a newline is normal. Anything else that is not a
    printable, space-free character is refused, and the value is never shown."""
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]

    def refuse(why: str) -> InputError:
        return InputError(f"serving.api_key: {origin} {why} (the value is not shown)",
                          file=str(inv.path), field="serving.api_key")

    if not value:
        raise refuse("is empty")
    if "\n" in value or "\r" in value:
        raise refuse("holds more than one line: it must hold the key on one line")
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in value):
        raise refuse("holds spaces or control characters")
    return value


def resolve_secrets(inv: Inventory) -> dict[str, str]:
    ref = inv.serving.api_key
    if ref is None:
        return {}
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise InputError(f"serving.api_key: environment variable {ref.env} is not set",
                             file=str(inv.path), field="serving.api_key")
        return {"api_key": clean_secret(value, origin=f"environment variable {ref.env}",
                                        inv=inv)}
    path = Path(os.path.expanduser(ref.file or ""))
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"serving.api_key: {ref.file} is not a regular file",
                             file=str(inv.path), field="serving.api_key")
        with open(path, "rb") as handle:
            raw = handle.read(64 * 1024 + 1)
    except OSError as err:
        raise InputError(f"serving.api_key: cannot read {ref.file}: {err.strerror}",
                         file=str(inv.path), field="serving.api_key") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"serving.api_key: {ref.file} is readable by others; chmod 600 it",
                         file=str(inv.path), field="serving.api_key")
    if len(raw) > 64 * 1024:
        raise InputError(f"serving.api_key: {ref.file} is too large for a key",
                         file=str(inv.path), field="serving.api_key")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"serving.api_key: {ref.file} is not UTF-8 text (the value is not "
                         "shown)", file=str(inv.path), field="serving.api_key") from None
    return {"api_key": clean_secret(text, origin=ref.file or "", inv=inv)}
