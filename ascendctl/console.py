"""Human and machine output: Rich on a terminal, plain text when piped, JSON on request."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("ASCENDCTL_PLAIN"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def get_console(stderr: bool = False):
    """A Rich console; on a non-terminal it prints plain text without colour or markup."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = is_terminal(stream)
    return Console(file=stream, force_terminal=tty, no_color=not tty, highlight=False,
                   soft_wrap=not tty, width=None if tty else 200)


def print_json(data: Any, stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    json.dump(data, stream, indent=2, sort_keys=False, default=str)
    stream.write("\n")
    stream.flush()
