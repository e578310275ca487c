"""A loaded playbook: plays, tasks and handlers, each remembering where it was written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

Condition = Union[bool, str, list[str]]
Order = Literal["parallel", "rank", "serial"]


@dataclass(frozen=True)
class Where:
    file: str
    line: Optional[int]
    field: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class Task:
    name: str
    module: str
    args: dict[str, Any]
    where: Where
    when: Optional[Condition] = None
    tags: frozenset[str] = frozenset()
    register: Optional[str] = None
    retries: Optional[int] = None
    delay: float = 5.0
    until: Optional[Condition] = None
    notify: tuple[str, ...] = ()
    ignore_errors: bool = False
    run_once: bool = False
    changed_when: Optional[Condition] = None
    failed_when: Optional[Condition] = None
    check_mode: Optional[bool] = None      # False: really run even under --check
    no_log: bool = False
    become: Optional[bool] = None
    timeout: Optional[float] = None
    vars: dict[str, Any] = field(default_factory=dict)
    listen: tuple[str, ...] = ()           # handlers: extra names they answer to
    index: int = 0                         # position in its play (for reports)

    @property
    def attempts(self) -> int:
        if self.retries is None:
            return 1
        return self.retries + 1


@dataclass
class Play:
    name: str
    hosts: str
    where: Where
    order: Order = "parallel"
    serial: Optional[Union[int, str]] = None
    vars: dict[str, Any] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    handlers: list[Task] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    gather_facts: bool = False
    any_errors_fatal: bool = False
    # Runs even after an earlier play stopped the run (cleanup: give back a lock), on
    # every host it names, failed ones included.
    always: bool = False
    # Runs only when an earlier play failed (a task failed or a host was unreachable),
    # on every host it names, failed ones included: Ansible's `rescue`, at play level.
    rescue: bool = False
    confirm: Optional[str] = None
    become: Optional[bool] = None

    def batch_size(self, host_count: int) -> int:
        """Hosts per batch: all (parallel), 1 (rank), or `serial` (a number or a percentage)."""
        if self.order == "rank":
            return 1
        if self.serial is None:
            return host_count if self.order == "parallel" else 1
        if isinstance(self.serial, str):
            percent = float(self.serial.rstrip("%"))
            return max(1, int(host_count * percent / 100))
        return max(1, int(self.serial))


@dataclass
class Rolling:
    """A block of plays run once per batch of serving groups (docs/playbooks.md, *Rolling
    over serving groups*): each batch's plays act only on the batch's hosts, its `rescue`
    plays run when one of its plays failed, its `always` plays after every batch; a failed
    batch ends the rollout."""

    name: str
    where: Where
    plays: list[Play]
    hosts: str = "all"                          # which serving groups roll (their hosts)
    max_unavailable: Union[int, str] = 1        # groups per batch (or a template)
    tags: frozenset[str] = frozenset()


PlaybookItem = Union[Play, Rolling]


@dataclass
class Playbook:
    path: Path
    plays: list[PlaybookItem]

    @property
    def directory(self) -> Path:
        return self.path.resolve().parent

    def all_plays(self) -> list[Play]:
        """Every play, those of rolling blocks in place (each once)."""
        out: list[Play] = []
        for item in self.plays:
            out.extend(item.plays if isinstance(item, Rolling) else [item])
        return out
