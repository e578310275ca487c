"""Turn whatever Paramiko or the socket layer raised into a ConnectError with a clear reason."""

from __future__ import annotations

import errno
import socket
from typing import Any

from ascendctl_runtime.nodeutil import host_port_text

from ascendctl.transport.errors import ConnectError, ConnectKind
from ascendctl.transport.hostkeys import fingerprint


def classify_connect_error(exc: BaseException, *, host: str, address: str, port: int,
                           user: str, timeout: float, key: str | None,
                           known_hosts: str, elapsed: float | None = None) -> ConnectError:
    import paramiko
    from paramiko.ssh_exception import NoValidConnectionsError

    where = host_port_text(address, port)   # a HostName from ~/.ssh/config may be anything
    if isinstance(exc, ConnectError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        name = address if port == 22 else f"[{address}]:{port}"
        return ConnectError(
            host, ConnectKind.HOST_KEY_CHANGED,
            f"host key CHANGED for {name}: it offers {exc.key.get_name()} "
            f"{fingerprint(exc.key)}, but {known_hosts} records {fingerprint(exc.expected_key)} "
            "(possible man-in-the-middle; if the node was reinstalled, remove the old entry "
            f"with: ssh-keygen -R '{name}' -f {known_hosts})")
    if isinstance(exc, paramiko.AuthenticationException):
        how = f"key {key}" if key else "ssh-agent / default keys"
        return ConnectError(host, ConnectKind.AUTH,
                            f"authentication failed for {user}@{where} ({how}): {exc}")
    if isinstance(exc, NoValidConnectionsError):
        codes = {getattr(err, "errno", None) for err in exc.errors.values()}
        if errno.ECONNREFUSED in codes:
            return ConnectError(host, ConnectKind.REFUSED,
                                f"connection refused by {where} (is sshd running?)")
        return ConnectError(host, ConnectKind.NO_ROUTE,
                            f"no route to host {address} (powered off or network down?)")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return ConnectError(host, ConnectKind.TIMEOUT,
                            f"timeout: no answer from {where} within {timeout:g}s")
    if isinstance(exc, socket.gaierror):
        return ConnectError(host, ConnectKind.DNS, f"cannot resolve {address}: {exc.strerror}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH,
                                                  errno.EHOSTDOWN):
        return ConnectError(host, ConnectKind.NO_ROUTE,
                            f"no route to host {address} ({exc.strerror})")
    if isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED:
        return ConnectError(host, ConnectKind.REFUSED,
                            f"connection refused by {where} (is sshd running?)")
    if isinstance(exc, paramiko.ChannelException):
        return ConnectError(host, ConnectKind.NO_ROUTE,
                            f"the jump host could not reach {where}: {exc.text}")
    if isinstance(exc, paramiko.SSHException):
        text = str(exc)
        if "banner" in text.lower():
            if elapsed is None or elapsed >= 0.8 * timeout:
                return ConnectError(host, ConnectKind.TIMEOUT,
                                    f"timeout: no SSH banner from {where} within {timeout:g}s")
            return ConnectError(host, ConnectKind.PROTOCOL,
                                f"{where} closed the connection before the SSH banner")
        if "no existing session" in text.lower():
            # paramiko's start_client gives up silently at its timeout; the next step
            # then finds no session.
            return ConnectError(host, ConnectKind.TIMEOUT,
                                f"timeout: no SSH handshake from {where} within {timeout:g}s")
        if "timeout" in text.lower() or "timed out" in text.lower():
            return ConnectError(host, ConnectKind.TIMEOUT,
                                f"timeout while connecting to {where}: {text}")
        return ConnectError(host, ConnectKind.PROTOCOL, f"SSH error from {where}: {text}")
    if isinstance(exc, (EOFError, ConnectionResetError)):
        return ConnectError(host, ConnectKind.PROTOCOL,
                            f"{where} closed the connection during the SSH handshake")
    if isinstance(exc, OSError):
        return ConnectError(host, ConnectKind.OTHER, f"cannot connect to {where}: {exc}")
    return ConnectError(host, ConnectKind.OTHER,
                        f"cannot connect to {where}: {type(exc).__name__}: {exc}")


def describe(exc: Any) -> str:
    return f"{type(exc).__name__}: {exc}"
