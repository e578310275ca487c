"""Sections of the recorded outputs in tests/fixtures/ that the fault tests read."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def body(name: str) -> str:
    """A fixture without its `# source:` line."""
    return (FIXTURES / name).read_text(encoding="utf-8").split("\n", 1)[1]


def sections(name: str, starts: tuple[str, ...]) -> list[tuple[str, str]]:
    """(heading line, text) of each section of a fixture; a section starts at a line that
    begins with one of `starts`, and the heading is not part of its text."""
    out: list[tuple[str, list[str]]] = []
    for line in body(name).splitlines():
        if line.startswith(starts):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return [(head, "\n".join(lines).strip("\n") + "\n") for head, lines in out]


def section(name: str, starts: tuple[str, ...], containing: str, index: int = 0) -> str:
    found = [text for head, text in sections(name, starts) if containing in head]
    return found[index]
