"""What a remote execution returns, and what one host's part of a parallel run returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

from ascendctl.transport.errors import RemoteCommandError

T = TypeVar("T")


@dataclass(frozen=True)
class CommandResult:
    """One remote execution: its exit status and everything it printed."""

    host: str
    command: str                 # the exact command line sent (already quoted)
    exit_status: Optional[int]   # None when the command timed out or was cut off
    stdout_bytes: bytes
    stderr_bytes: bytes
    duration: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    def check(self) -> "CommandResult":
        """Raise RemoteCommandError unless the command exited 0."""
        if not self.ok:
            raise RemoteCommandError(self)
        return self


class HostStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass
class HostResult(Generic[T]):
    """One host's outcome in a parallel run. A failure never hides another host's result."""

    host: str
    status: HostStatus
    value: Optional[T] = None
    error: Optional[str] = None      # one line, for the operator
    error_kind: Optional[str] = None  # e.g. refused, timeout, auth, unknown_host_key
    duration: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is HostStatus.OK

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"host": self.host, "status": self.status.value,
                                "duration_s": round(self.duration, 3)}
        if self.error:
            data["error"] = self.error
            data["error_kind"] = self.error_kind
        return data
