"""Resolve the inventory's secret references on this machine (only when asked to)."""

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Callable
from pathlib import Path

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.inventory.inputfile import open_input_file, read_capped
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
    raw = _read_key_file(Path(os.path.expanduser(ref.file or "")), ref.file or "", error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{ref.file} is not UTF-8 text (the value is not shown)") from None
    return clean_secret(text, origin=ref.file or "", refuse=error)


def _read_key_file(path: Path, name: str, error: Callable[[str], InputError]) -> bytes:
    """One open: the file checked (regular, 0600, small) is the file read. A key file
    readable by others is refused before its content is read."""
    try:
        with open_input_file(path, what="key file", limit=MAX_SECRET_FILE) as handle:
            shared = os.fstat(handle.fileno()).st_mode & (stat.S_IRWXG | stat.S_IRWXO)
            raw = b"" if shared else read_capped(handle, MAX_SECRET_FILE, file=name,
                                                 what="a key file")
    except InputError as err:
        raise error(f"{name}: {err.reason}") from None
    except OSError as err:
        raise error(f"cannot read {name}: {err.strerror}") from None
    if shared:
        raise error(f"{name} is readable by others; chmod 600 it")
    return raw


def resolve_secrets(inv: Inventory) -> dict[str, str]:
    """{"api_key": ..., "health_token": ...} for the references the inventory makes."""
    found = {}
    if inv.serving.api_key is not None:
        found["api_key"] = _resolve(inv, inv.serving.api_key, "serving.api_key")
    if inv.serving.health.token is not None:
        found["health_token"] = _resolve(inv, inv.serving.health.token, "serving.health.token")
    return found
