"""What a playbook run produced: per task and host, per play, and the recap."""

from __future__ import annotations

import enum
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from ascendctl.exitcodes import Exit
from ascendctl.playbook.modules.base import FileDiff


class TaskStatus(str, enum.Enum):
    """What one task did on one host. Compares, hashes and formats as its text value, so
    `result.status == "changed"` and `{"ok": ...}[result.status]` keep working."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:
        return hash(self.value)


STATUSES = tuple(status.value for status in TaskStatus)
# Registered fields worth keeping in JSON/JUnit (capped so reports stay small).
REPORT_FIELDS = ("rc", "stdout", "stderr", "status", "state", "elapsed", "path", "dest")
REPORT_TEXT_LIMIT = 4096


@dataclass
class TaskHostResult:
    host: str
    status: TaskStatus               # text is accepted and converted
    msg: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    diffs: list[FileDiff] = field(default_factory=list)
    duration: float = 0.0
    attempts: int = 1
    ignored: bool = False            # failed, but ignore_errors
    error_kind: Optional[str] = None
    no_log: bool = False

    def __post_init__(self) -> None:
        self.status = TaskStatus(self.status)

    @property
    def counts_as_failure(self) -> bool:
        return self.status is TaskStatus.FAILED and not self.ignored

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value,
                               "duration_s": round(self.duration, 3)}
        if self.no_log:
            out["msg"] = "(output hidden: no_log)"
            return out
        if self.msg:
            out["msg"] = self.msg
        if self.ignored:
            out["ignored"] = True
        if self.attempts > 1:
            out["attempts"] = self.attempts
        if self.error_kind:
            out["error_kind"] = self.error_kind
        fields = {}
        for key in REPORT_FIELDS:
            if key in self.data:
                value = self.data[key]
                if isinstance(value, str) and len(value) > REPORT_TEXT_LIMIT:
                    value = value[:REPORT_TEXT_LIMIT] + "…(truncated)"
                fields[key] = value
        if fields:
            out["result"] = fields
        if self.diffs:
            out["diff"] = [d.as_dict() for d in self.diffs]
        return out


@dataclass
class TaskReport:
    name: str
    module: str
    file: str
    line: Optional[int]
    handler: bool = False
    run_once: bool = False
    results: dict[str, TaskHostResult] = field(default_factory=dict)
    duration: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "module": self.module, "where": f"{self.file}:{self.line}",
                "handler": self.handler, "duration_s": round(self.duration, 3),
                "hosts": {h: r.as_dict() for h, r in self.results.items()}}


@dataclass
class PlayReport:
    name: str
    hosts: list[str]
    order: str
    tasks: list[TaskReport] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "hosts": self.hosts, "order": self.order,
                "tasks": [t.as_dict() for t in self.tasks]}
        if self.note:
            data["note"] = self.note
        return data


@dataclass
class RunReport:
    playbook: str
    inventory: str
    check: bool = False
    plays: list[PlayReport] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    duration: float = 0.0
    interrupted: bool = False
    aborted: str = ""                 # why the run stopped early (any_errors_fatal, ...)
    exec_counts: dict[str, int] = field(default_factory=dict)

    def recap(self) -> dict[str, dict[str, int]]:
        hosts: dict[str, Counter[str]] = {}
        for play in self.plays:
            for host in play.hosts:
                hosts.setdefault(host, Counter())
            for task in play.tasks:
                for host, res in task.results.items():
                    counter = hosts.setdefault(host, Counter())
                    counter[res.status.value] += 1
                    if res.ignored:
                        counter["ignored"] += 1
        return {h: {s: c.get(s, 0) for s in (*STATUSES, "ignored")} for h, c in hosts.items()}

    def exit_code(self) -> Exit:
        if self.interrupted:
            return Exit.INTERRUPTED
        results = [r for p in self.plays for t in p.tasks for r in t.results.values()]
        if any(r.status is TaskStatus.UNREACHABLE for r in results):
            return Exit.UNREACHABLE
        if any(r.counts_as_failure for r in results) or self.aborted:
            return Exit.FAILED
        return Exit.OK

    def changed_count(self) -> int:
        return sum(c["changed"] for c in self.recap().values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook, "inventory": self.inventory, "check": self.check,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": round(self.duration, 3), "interrupted": self.interrupted,
            "aborted": self.aborted or None, "exit_code": int(self.exit_code()),
            "plays": [p.as_dict() for p in self.plays], "recap": self.recap(),
            "remote_executions": self.exec_counts,
        }
