"""A saved log, read as `ascendctl doctor explain` needs it: a regular file (or standard
input), streamed in blocks of whole lines, never more than a block and one line in memory.

The file is opened by the safe reader (ascendctl/inventory/inputfile.py), as every file an
operator hands us: a FIFO or a device is refused before anything is read, and a file over
the size limit is refused up front (standard input is counted as it is read). A line longer than MAX_LINE_BYTES is kept to its
first MAX_LINE_BYTES and the rest dropped, so a log without newlines costs no more memory
than one of normal lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Optional

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import open_input_file

MAX_LOG_BYTES = 16 << 30           # 16 GiB: a day of a busy cluster's engine logs
MAX_LINE_BYTES = 1 << 20           # longer lines are matched on their first 1 MiB
BLOCK_BYTES = 256 << 10         # read size; a block holds its whole lines
STDIN = "-"


@contextmanager
def open_log(path: str, *, stdin: Optional[IO[bytes]] = None,
             limit: int = MAX_LOG_BYTES) -> Iterator[IO[bytes]]:
    """PATH opened for binary reading (`-`: STDIN). Not a regular file, missing,
    unreadable or larger than LIMIT: InputError, nothing read."""
    if path == STDIN:
        if stdin is None:
            raise InputError("no standard input to read", field="FILE")
        yield stdin
        return
    with open_input_file(path, what="log", limit=limit) as handle:
        yield handle


@dataclass
class LineBlock:
    """Whole lines of a log, undecoded: `first` is the number (from 1) of the first."""
    first: int
    data: bytes             # the lines joined by b"\n"

    def lines(self) -> list[str]:
        """The lines decoded (bytes that are not UTF-8 replaced)."""
        return self.data.decode("utf-8", "replace").split("\n")


class LogReader:
    """Blocks of whole lines from STREAM; `lines`, `bytes` and `cut_lines` count what was
    read so far."""

    def __init__(self, stream: IO[bytes], *, name: str, max_bytes: int = MAX_LOG_BYTES,
                 max_line: int = MAX_LINE_BYTES, block: int = BLOCK_BYTES):
        self.stream, self.name = stream, name
        self.max_bytes, self.max_line, self.block = max_bytes, max_line, block
        self.lines = self.bytes = self.cut_lines = 0

    def blocks(self) -> Iterator[LineBlock]:
        pending = b""            # the start of a line whose newline has not come yet
        skipping = False         # inside a line already cut: drop it up to its newline
        while True:
            chunk = self._read()
            if not chunk:
                break
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk, skipping = chunk[newline + 1:], False
            data = pending + chunk if pending else chunk
            last = data.rfind(b"\n")
            complete, pending = (data[:last], data[last + 1:]) if last >= 0 else (None, data)
            if complete is not None:
                yield self._block(complete)
            if len(pending) > self.max_line:
                yield self._block(pending)    # cut to max_line there; the rest is dropped
                pending, skipping = b"", True
        if pending:
            yield self._block(pending)

    def _read(self) -> bytes:
        try:
            chunk = self.stream.read(self.block)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror}", file=self.name) from None
        self.bytes += len(chunk)
        if self.bytes > self.max_bytes:
            raise InputError(f"more than {self.max_bytes} bytes: too large for a log",
                             file=self.name)
        return chunk

    def _block(self, data: bytes) -> LineBlock:
        """DATA: whole lines joined by newlines, each cut to max_line."""
        first = self.lines + 1
        self.lines += data.count(b"\n") + 1
        if len(data) > self.max_line:      # only then can a line be too long
            lines = data.split(b"\n")
            long = [i for i, line in enumerate(lines) if len(line) > self.max_line]
            if long:
                for index in long:
                    lines[index] = lines[index][:self.max_line]
                self.cut_lines += len(long)
                data = b"\n".join(lines)
        return LineBlock(first, data)
