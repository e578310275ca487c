"""Help text that wraps cleanly at any terminal width.

Docstrings are wrapped at the source's line length; Typer keeps those line breaks in every
paragraph after the first, so `--help` broke sentences mid-line on an 80-column terminal.
Each command's help is reflowed once here: lines of a paragraph are joined, while list
items, indented blocks and blank lines (paragraph breaks) are kept.
"""

from __future__ import annotations

import inspect
import re

import typer

_KEEP = re.compile(r"^\s*([-*•]|\d+[.)]|\$ |[A-Za-z0-9_.-]+:\s{2,})|^\s{2,}")


def reflow(text: str) -> str:
    """Join the lines of each paragraph; keep list items and indented lines as lines."""
    out: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        stripped = line.strip()
        if not stripped:
            out.append("")
        elif out and out[-1] and not _KEEP.match(line):
            out[-1] = f"{out[-1]} {stripped}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def reflow_app(app: typer.Typer) -> None:
    """Reflow the help of every command and group of APP, recursively."""
    for command in app.registered_commands:
        text = command.help or (inspect.getdoc(command.callback) if command.callback else None)
        if text:
            command.help = reflow(text)
    for group in app.registered_groups:
        info = group.typer_instance.info if group.typer_instance else None
        for holder in (group, info):
            if holder is not None and isinstance(holder.help, str):
                holder.help = reflow(holder.help)
        if group.typer_instance is not None:
            reflow_app(group.typer_instance)
