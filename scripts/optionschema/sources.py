"""An sdist read into memory: its text files by path (without the top directory), parsed
with ast on demand. Nothing from it is imported or executed."""

from __future__ import annotations

import ast
import hashlib
import re
import tarfile
from functools import cached_property
from pathlib import Path

TEXT_SUFFIXES = (".py", ".md")
# what the extraction reads: the packages' code, vllm-ascend's docs and Dockerfiles
KEPT = ("vllm/", "vllm_ascend/", "docs/source/")
CLASS_LINE = re.compile(rb"^class ([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


class SourceTree:
    def __init__(self, sdist: Path):
        self.sdist = sdist
        self.files: dict[str, bytes] = {}
        with tarfile.open(sdist) as archive:
            for member in archive:
                if not member.isfile():
                    continue
                _top, _sep, path = member.name.partition("/")
                name = path.rsplit("/", 1)[-1]
                if (path.endswith(TEXT_SUFFIXES) and path.startswith(KEPT)) \
                        or name.startswith("Dockerfile"):
                    handle = archive.extractfile(member)
                    if handle is not None:
                        self.files[path] = handle.read()
        self._modules: dict[str, ast.Module] = {}

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.sdist.read_bytes()).hexdigest()

    def paths(self, prefix: str, suffix: str = ".py") -> list[str]:
        return sorted(p for p in self.files if p.startswith(prefix) and p.endswith(suffix))

    def defining(self, prefix: str, class_name: str) -> list[str]:
        """The modules under `prefix` whose text defines `class class_name` at top level."""
        return [p for p in self._class_index.get(class_name, ()) if p.startswith(prefix)]

    @cached_property
    def _class_index(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        for path in self.paths(""):
            for match in CLASS_LINE.finditer(self.files[path]):
                index.setdefault(match.group(1).decode(), []).append(path)
        return index

    def text(self, path: str) -> str:
        return self.files[path].decode("utf-8", errors="replace")

    def module(self, path: str) -> ast.Module:
        if path not in self._modules:
            self._modules[path] = ast.parse(self.files[path], filename=path)
        return self._modules[path]
