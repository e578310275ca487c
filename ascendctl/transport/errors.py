"""Transport errors with a one-line reason an operator can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit

if TYPE_CHECKING:
    from ascendctl.transport.results import CommandResult


class ConnectKind:
    REFUSED = "refused"
    TIMEOUT = "timeout"
    NO_ROUTE = "no_route"
    DNS = "dns"
    AUTH = "auth"
    UNKNOWN_HOST_KEY = "unknown_host_key"
    HOST_KEY_CHANGED = "host_key_changed"
    PROTOCOL = "ssh_protocol"
    JUMP = "jump_host"
    CLOSED = "connection_lost"
    INTERRUPTED = "interrupted"
    OTHER = "other"

    # Worth another attempt: the host may be booting or the network may be blinking.
    RETRYABLE = frozenset({REFUSED, TIMEOUT, NO_ROUTE, PROTOCOL})


class ConnectError(AscendctlError):
    """The host could not be reached or would not let us in: the host is unreachable."""

    exit_code = Exit.UNREACHABLE

    def __init__(self, host: str, kind: str, reason: str, *, attempts: int = 1):
        self.host, self.kind, self.reason, self.attempts = host, kind, reason, attempts
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"{host}: {reason}{tries}")

    @property
    def retryable(self) -> bool:
        return self.kind in ConnectKind.RETRYABLE


class ConnectionLost(ConnectError):
    """An established connection dropped in the middle of a command."""

    def __init__(self, host: str, reason: str):
        super().__init__(host, ConnectKind.CLOSED, reason)


class CommandTimeout(AscendctlError):
    def __init__(self, host: str, command: str, timeout: float):
        self.host, self.command, self.timeout = host, command, timeout
        super().__init__(f"{host}: command timed out after {timeout:g}s")


class RemoteCommandError(AscendctlError):
    """A remote command exited non-zero (raised only when the caller asks to check)."""

    def __init__(self, result: "CommandResult"):
        self.result = result
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
        tail = f": {detail[-1][:300]}" if detail else ""
        if result.timed_out:
            what = "timed out"
        else:
            what = f"exited {result.exit_status}"
        if "sudo: a password is required" in result.stderr:
            tail = (": sudo needs a password; ascendctl runs `sudo -n` - give the user "
                    "passwordless sudo (NOPASSWD) or connect as root")
        super().__init__(f"{result.host}: remote command {what}{tail}")
