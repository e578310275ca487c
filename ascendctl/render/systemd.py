"""Quoting for systemd unit files (systemd.service(5) "Command lines", systemd.unit(5)
"Specifiers"): `%` is a specifier everywhere and `$` expands variables in ExecStart."""

from __future__ import annotations

import re

_SAFE = re.compile(r"\A[A-Za-z0-9_@%+=:,./-]+\Z")  # \Z: "a\n" is not safe


def escape_specifiers(value: str) -> str:
    return value.replace("%", "%%")


def exec_arg(arg: str) -> str:
    """One ExecStart argument: specifiers and variables escaped, quoted when needed."""
    escaped = escape_specifiers(arg).replace("$", "$$")
    if escaped == ";":
        return "\\;"
    if escaped and _SAFE.match(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: list[str]) -> str:
    return " ".join(exec_arg(arg) for arg in argv)


def environment_assignment(key: str, value: str) -> str:
    """The value of an `Environment=` line for one variable, always quoted."""
    text = escape_specifiers(f"{key}={value}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
