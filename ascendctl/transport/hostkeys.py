"""Host-key verification: strict by default, `accept-new` only when asked.

strict      the host's key must already be in the inventory's known_hosts file.
accept-new  an unknown host's key is recorded in that file (like OpenSSH's
            StrictHostKeyChecking=accept-new); a key that differs from a recorded one
            is still refused (paramiko raises BadHostKeyException before asking us).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from ascendctl.transport.errors import ConnectError, ConnectKind

_append_lock = threading.Lock()


def fingerprint(key: Any) -> str:
    """OpenSSH-style SHA256 fingerprint of a paramiko key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path(value: str) -> Path:
    return Path(os.path.expanduser(value))


class UnknownHostKey(ConnectError):
    def __init__(self, host: str, hostname: str, key: Any, known_hosts: Path):
        self.fingerprint = fingerprint(key)
        super().__init__(
            host, ConnectKind.UNKNOWN_HOST_KEY,
            f"unknown host key for {hostname} ({key.get_name()} {self.fingerprint}), not in "
            f"{known_hosts}; verify it and add it (ssh-keyscan), or set "
            "ssh.host_key_checking: accept-new")


class StrictPolicy:
    """Refuse hosts whose key is not in known_hosts (paramiko's RejectPolicy, with a reason)."""

    def __init__(self, host: str, known_hosts: Path):
        self.host, self.known_hosts = host, known_hosts

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        raise UnknownHostKey(self.host, hostname, key, self.known_hosts)


class AcceptNewPolicy:
    """Record an unknown host's key in known_hosts and accept it."""

    def __init__(self, host: str, known_hosts: Path):
        self.host, self.known_hosts = host, known_hosts
        self.recorded: list[str] = []

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        append_known_host(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.recorded.append(f"{hostname} {key.get_name()} {fingerprint(key)}")


def append_known_host(path: Path, hostname: str, key: Any) -> None:
    """Append one `host keytype base64` line, serialised across threads and processes."""
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _append_lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Another process may have recorded this host between our check and now.
            if line.strip() not in _read_lines(path):
                os.write(fd, line.encode())
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_lines(path: Path) -> set[str]:
    try:
        return {ln.strip() for ln in path.read_text(errors="replace").splitlines()}
    except OSError:
        return set()


def configure_client(client: Any, host: str, known_hosts: str, checking: str) -> Any:
    """Load the known_hosts file into a paramiko SSHClient and set the policy.

    Only the inventory's file is trusted (not also ~/.ssh/known_hosts), so what the
    inventory says is what is checked.
    """
    path = known_hosts_path(known_hosts)
    if path.is_file():
        client.get_host_keys().load(str(path))
    policy = AcceptNewPolicy(host, path) if checking == "accept-new" else StrictPolicy(host, path)
    client.set_missing_host_key_policy(policy)
    return policy
