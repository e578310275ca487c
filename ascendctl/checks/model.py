"""What a check is and what it reports."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    """How bad it is when the check trips."""

    FAIL = "fail"
    WARN = "warn"


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"          # not applicable, or blocked by another check that already failed


@dataclass(frozen=True)
class CheckSpec:
    id: str                # stable: used by --only/--skip, JSON, JUnit
    category: str          # npu | roce | versions | pcie | host | network | launch
    severity: Severity
    scope: str             # node | cluster (cluster checks compare nodes, report per node)
    title: str
    catches: str           # what it catches (catalogue text)
    remediation: str       # the generic fix; results carry the concrete command


@dataclass(frozen=True)
class Outcome:
    """What a check function returns for one node."""

    status: Status
    message: str
    remediation: str | None = None
    details: tuple[str, ...] = ()

    @staticmethod
    def ok(message: str, *details: str) -> "Outcome":
        return Outcome(Status.PASS, message, None, tuple(details))

    @staticmethod
    def skip(message: str) -> "Outcome":
        return Outcome(Status.SKIP, message)


@dataclass(frozen=True)
class CheckResult:
    check_id: str
    category: str
    severity: Severity
    node: str
    status: Status
    message: str
    remediation: str | None = None
    details: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "id": self.check_id,
            "category": self.category,
            "severity": self.severity.value,
            "node": self.node,
            "status": self.status.value,
            "message": self.message,
            "remediation": self.remediation,
            "details": list(self.details),
        }
