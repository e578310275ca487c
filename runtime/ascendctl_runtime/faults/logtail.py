"""The lines log files gained since the previous reading, read in bounded pieces.

Each file is followed by its inode and the offset read up to. The first reading is a
baseline: every file it finds starts at its end, since old lines are history, not new
faults. A file that appears later (a new process's plog, a rotated log) starts at 0. A
file whose inode changed (rotated) or that shrank (truncated) starts again at 0. At most
MAX_READ_BYTES are read per file per reading, up to its last complete line; a file more
than MAX_BEHIND_BYTES behind skips ahead (said in the errors). Only the MAX_FILES most
recently modified of at most MAX_NAMES matching files are read.
"""

from __future__ import annotations

import glob
import itertools
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_BEHIND_BYTES = 64 * 1024 * 1024
MAX_NAMES = 4096
MAX_FILES = 64


@dataclass(frozen=True)
class LogChunk:
    path: str
    text: str           # whole lines, decoded (invalid UTF-8 replaced)


class LogTail:
    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = list(patterns)
        self.baseline_done = False
        self.files: Dict[str, Tuple[int, int]] = {}      # path -> (inode, offset)

    def state(self) -> Dict[str, Any]:
        return {"baseline_done": self.baseline_done,
                "files": {path: [inode, offset] for path, (inode, offset) in self.files.items()}}

    def restore(self, state: Dict[str, Any]) -> None:
        files = {}
        for path, (inode, offset) in dict(state["files"]).items():
            if isinstance(path, str) and isinstance(inode, int) and isinstance(offset, int):
                files[path] = (inode, max(0, offset))
        self.files = dict(itertools.islice(files.items(), MAX_NAMES))
        self.baseline_done = bool(state["baseline_done"])

    def read(self) -> Tuple[List[LogChunk], List[str]]:
        """The new complete lines of each file, and what went wrong (never raised)."""
        errors: List[str] = []
        found: Dict[str, os.stat_result] = {}
        for pattern in self.patterns:
            for path in itertools.islice(glob.iglob(pattern), MAX_NAMES - len(found)):
                try:
                    found[path] = os.stat(path)
                except OSError:
                    continue            # gone between the listing and the stat
        newest = set(sorted(found, key=lambda p: found[p].st_mtime, reverse=True)[:MAX_FILES])
        chunks: List[LogChunk] = []
        files: Dict[str, Tuple[int, int]] = {}
        for path, info in found.items():
            known = self.files.get(path)
            if known is None or known[0] != info.st_ino or known[1] > info.st_size:
                start = info.st_size if not self.baseline_done or (known is None and path not in newest) else 0
                known = (info.st_ino, start)
            if path in newest and known[1] < info.st_size:
                offset, text, error = _read_new(path, known[1], info.st_size)
                known = (info.st_ino, offset)
                if text:
                    chunks.append(LogChunk(path, text))
                if error:
                    errors.append(error)
            files[path] = known
        self.files = files
        self.baseline_done = True
        return chunks, errors


def _read_new(path: str, offset: int, size: int) -> Tuple[int, str, str]:
    """(the offset read up to, the text of the complete lines read, an error or "")."""
    error = ""
    if size - offset > MAX_BEHIND_BYTES:
        error = f"{path}: {size - offset} bytes behind, skipped to its last {MAX_READ_BYTES}"
        offset = size - MAX_READ_BYTES
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(min(size - offset, MAX_READ_BYTES))
    except OSError as err:
        return offset, "", f"{path}: {err.strerror or err}"
    end = data.rfind(b"\n") + 1
    if end == 0:
        if len(data) < MAX_READ_BYTES:
            return offset, "", error         # a line still being written: read it next time
        end = len(data)                      # one line longer than a read: passed over
        data = b""
    return offset + end, data[:end].decode("utf-8", "replace"), error
