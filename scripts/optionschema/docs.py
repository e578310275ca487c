"""What vllm-ascend's own documents in an sdist say: the vLLM version each release pairs
(versioning policy table, Dockerfile), the `vllm serve` commands and `export`s of its
tutorials, and the release-note lines that remove, rename or deprecate something."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

from scripts.optionschema.sources import SourceTree

POLICY = "docs/source/community/versioning_policy.md"
NOTES = "docs/source/user_guide/release_notes.md"
TUTORIALS = "docs/source/tutorials/"
POLICY_ROW = re.compile(r"^\|\s*v(?P<ascend>\d[^\s|]*)\s*\|\s*v(?P<vllm>\d[^\s|]*)\s*\|")
VLLM_TAG = re.compile(r"^ARG VLLM_TAG=v(\S+)", re.MULTILINE)
FENCE = re.compile(r"^\s*(```|~~~)")
EXPORT = re.compile(r"^\s*export\s+(.*)$")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
SEPARATORS = {";", "&", "&&", "|", "||", ">", ">>", "<", "(", ")", ">&", "<&", "|&"}
REMOVAL_WORDS = re.compile(
    r"\b(remov\w*|renam\w*|deprecat\w*|split into|was split|has been split|unified|"
    r"migrat\w*|no longer|cleaned up|in favou?r of|replaced by|dropped)\b", re.IGNORECASE)
CHANGE_SECTIONS = re.compile(r"Deprecat|Breaking|Configuration Changes|Migration")


def policy_pairs(tree: SourceTree) -> dict[str, str]:
    """vllm-ascend release → vLLM version, from the versioning policy's table."""
    pairs: dict[str, str] = {}
    if POLICY not in tree.files:
        return pairs
    for line in tree.text(POLICY).splitlines():
        match = POLICY_ROW.match(line)
        if match:
            pairs.setdefault(match["ascend"], match["vllm"])
    return pairs


def dockerfile_vllm(tree: SourceTree) -> str | None:
    if "Dockerfile" not in tree.files:
        return None
    match = VLLM_TAG.search(tree.text("Dockerfile"))
    return match.group(1) if match else None


# -- tutorials ---------------------------------------------------------------------------

def tutorials(tree: SourceTree) -> list[dict[str, object]]:
    """Per tutorial page: its `vllm serve` command lines (argv after `serve`) and the
    environment variables it exports or sets in front of a command, with line numbers."""
    pages = []
    for path in tree.paths(TUTORIALS, ".md"):
        commands: list[dict[str, object]] = []
        env: dict[str, int] = {}
        for line, tokens in _shell_commands(tree.text(path)):
            for name in _assignments(tokens):
                env.setdefault(name, line)
            argv = _serve_argv(tokens)
            if argv is not None:
                commands.append({"line": line, "argv": argv})
        if commands or env:
            pages.append({"file": path, "commands": commands,
                          "env": [{"name": n, "line": n_line} for n, n_line in sorted(env.items())]})
    return pages


def _code_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of each fenced code block."""
    block: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if block is None:
                block, start = [], number + 1
            else:
                yield start, block
                block = None
        elif block is not None:
            block.append(line)


def _shell_commands(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line, tokens) of each shell command in the code blocks: backslash continuations
    joined, a quote left open continued on the next lines, separators as own tokens."""
    for start, lines in _code_blocks(text):
        index = 0
        while index < len(lines):
            first = index
            logical = lines[index]
            while logical.endswith("\\") and index + 1 < len(lines):
                index += 1
                logical = logical[:-1] + " " + lines[index]
            tokens = _split(logical)
            while tokens is None and index + 1 < len(lines) and index - first < 60:
                index += 1
                logical += "\n" + lines[index]
                while logical.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    logical = logical[:-1] + " " + lines[index]
                tokens = _split(logical)
            index += 1
            if tokens:
                yield start + first, tokens


def _split(text: str) -> list[str] | None:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:   # a quote left open: the command goes on
        return None


def _assignments(tokens: list[str]) -> Iterator[str]:
    """Names set by `export A=1 B=2` and by `A=1 cmd` prefixes."""
    at_start = True
    exporting = False
    for token in tokens:
        if token in SEPARATORS:
            at_start, exporting = True, False
            continue
        if at_start and token == "export":
            exporting = True
            continue
        match = ASSIGNMENT.match(token)
        if match and (at_start or exporting):
            yield match.group(1)
            continue
        at_start = False


def _serve_argv(tokens: list[str]) -> list[str] | None:
    for index, token in enumerate(tokens[:-1]):
        if token.rsplit("/", 1)[-1] == "vllm" and tokens[index + 1] == "serve":
            argv = []
            for item in tokens[index + 2:]:
                if item in SEPARATORS:
                    break
                argv.append(item)
            return argv
    return None


# -- release notes -----------------------------------------------------------------------

def note_sections(tree: SourceTree) -> Iterator[tuple[str, str, int, str]]:
    """(release, subsection, line number, text) of every line of the release notes."""
    release = section = ""
    for number, line in enumerate(tree.text(NOTES).splitlines(), 1):
        if line.startswith("## v"):
            release, section = line[3:].split()[0], ""
        elif line.startswith("### "):
            section = line[4:].strip()
        elif release:
            yield release, section, number, line.rstrip()


def removal_lines(tree: SourceTree, releases: set[str]) -> list[dict[str, object]]:
    """The lines of `releases`' notes that may remove, rename, split, unify, migrate or
    deprecate an option: every line of a deprecation/breaking/migration section, and
    elsewhere every line with such a word that names a `code` token."""
    found = []
    for release, section, number, text in note_sections(tree):
        if release not in releases or not text.strip():
            continue
        if CHANGE_SECTIONS.search(section) or ("`" in text and REMOVAL_WORDS.search(text)):
            found.append({"release": release, "section": section, "line": number,
                          "text": text.strip()})
    return found
