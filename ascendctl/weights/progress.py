"""Push progress: Rich bars per node and in total on a terminal, plain lines otherwise.

Both go to stderr, so `--json` output on stdout stays machine-readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from ascendctl.console import get_console, is_terminal

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

PLAIN_EVERY = 2.0


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


class PushProgress:
    """Per-node byte counters fed by relay events; renders itself."""

    def __init__(self, totals: dict[str, int], *, enabled: bool = True):
        self.totals = totals
        self.done = {name: 0 for name in totals}
        self._session_base = dict(self.done)
        self._lock = threading.Lock()
        self.enabled = enabled and sum(totals.values()) > 0
        self.rich = self.enabled and is_terminal(sys.stderr)
        self.started = time.monotonic()
        self._last_plain = 0.0
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> "PushProgress":
        if self.rich:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                                       TimeRemainingColumn, TransferSpeedColumn)

            self._progress = Progress(TextColumn("{task.description:>12}"), BarColumn(),
                                      DownloadColumn(binary_units=True),
                                      TransferSpeedColumn(), TimeRemainingColumn(),
                                      console=get_console(stderr=True), transient=False)
            self._progress.start()
            for name, total in self.totals.items():
                self._tasks[name] = self._progress.add_task(name, total=max(total, 1),
                                                            completed=0 if total else 1)
            self._tasks["\0total"] = self._progress.add_task(
                "total", total=max(sum(self.totals.values()), 1))
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
        elif self.enabled:
            self._plain(force=True)

    def new_session(self) -> None:
        """A new chain starts: nodes count from zero again."""
        with self._lock:
            self._session_base = dict(self.done)

    def on_event(self, event: dict) -> None:
        if event.get("ev") != "progress" or event.get("node") not in self.done:
            return
        name = event["node"]
        with self._lock:
            self.done[name] = self._session_base[name] + int(event.get("written", 0))
        if self._progress is not None:
            self._progress.update(self._tasks[name], completed=self.done[name])
            self._progress.update(self._tasks["\0total"], completed=sum(self.done.values()))
        elif self.enabled:
            self._plain()

    def _plain(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_plain < PLAIN_EVERY:
            return
        self._last_plain = now
        total = sum(self.totals.values())
        done = sum(self.done.values())
        elapsed = max(now - self.started, 1e-6)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else float("inf")
        nodes = " ".join(f"{n} {human_bytes(self.done[n])}/{human_bytes(t)}"
                         for n, t in self.totals.items())
        eta_text = f"{eta:.0f}s" if eta != float("inf") else "?"
        print(f"push: {nodes} | total {human_bytes(done)}/{human_bytes(total)} "
              f"({100 * done / max(total, 1):.0f}%) {human_bytes(rate)}/s ETA {eta_text}",
              file=sys.stderr, flush=True)
