"""Host-key verification: strict by default, `accept-new` only when asked.

strict      the host's key must already be in the inventory's known_hosts file.
accept-new  an unknown host's key is recorded in that file (like OpenSSH's
            StrictHostKeyChecking=accept-new); a key that differs from a recorded one
            is still refused (paramiko raises BadHostKeyException before asking us).

The same policy holds for the OpenSSH path (weights/openssh.py: only the inventory's
file, `GlobalKnownHostsFile=/dev/null`). The file is read here line by line rather than by
Paramiko's loader, which fails the whole file ("InvalidHostKey") on one line it does not
understand:

- hashed host names (`|1|salt|hash`) and `[host]:port` work as in OpenSSH;
- `@revoked` keys are refused, even where the same key is also listed as trusted
  (OpenSSH does the same), and never recorded by accept-new;
- `@cert-authority` lines are skipped: this transport does not verify host certificates,
  so a host known only through a CA is reported as unknown with that explanation;
- any other line it cannot parse is skipped (OpenSSH ignores it too).

The file itself is read through ascendctl/inventory/known_hosts.py: bounded, and refused
when it is a FIFO, a device or a directory.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.inventory.known_hosts import known_hosts_path, read_known_hosts_text
from ascendctl.transport.errors import ConnectError, ConnectKind

_append_lock = threading.Lock()


def fingerprint(key: Any) -> str:
    """OpenSSH-style SHA256 fingerprint of a paramiko key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class UnknownHostKey(ConnectError):
    def __init__(self, host: str, hostname: str, key: Any, known_hosts: Path,
                 hint: str = ""):
        self.fingerprint = fingerprint(key)
        super().__init__(
            host, ConnectKind.UNKNOWN_HOST_KEY,
            f"unknown host key for {hostname} ({key.get_name()} {self.fingerprint}), not in "
            f"{known_hosts}{hint}; verify it and add it (ssh-keyscan), or set "
            "ssh.host_key_checking: accept-new")


class RevokedHostKey(ConnectError):
    def __init__(self, host: str, hostname: str, key: Any, known_hosts: Path):
        super().__init__(
            host, ConnectKind.HOST_KEY_CHANGED,
            f"host key of {hostname} ({key.get_name()} {fingerprint(key)}) is marked "
            f"@revoked in {known_hosts}: refusing to connect")


@dataclass
class KnownHosts:
    """What a known_hosts file says: trusted keys (a paramiko HostKeys), revoked keys, and
    what was skipped."""

    path: Path
    trusted: list[tuple[list[str], Any]] = field(default_factory=list)
    revoked: list[tuple[list[str], Any]] = field(default_factory=list)
    cert_authorities: int = 0
    skipped: int = 0

    def trusts_by_pattern(self, hostname: str, key: Any) -> bool:
        """A wildcard entry (`*.lab key`) that Paramiko's lookup does not match."""
        return any(any(ch in name for ch in "*?!") and _names_match(names, hostname)
                   and candidate == key
                   for names, candidate in self.trusted for name in names)

    def is_revoked(self, hostname: str, key: Any) -> bool:
        return any(_names_match(names, hostname) and candidate == key
                   for names, candidate in self.revoked)


def load_known_hosts(path: Path) -> KnownHosts:
    from paramiko.hostkeys import HostKeyEntry

    known = KnownHosts(path)
    text = read_known_hosts_text(path)
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = None
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            line = line.strip()
            if marker == "@cert-authority":
                known.cert_authorities += 1
                continue
            if marker != "@revoked":
                known.skipped += 1
                continue
        try:
            entry = HostKeyEntry.from_line(line)
        except Exception:  # noqa: BLE001 - a line OpenSSH would ignore too
            entry = None
        if entry is None or entry.key is None:
            known.skipped += 1
            continue
        target = known.revoked if marker == "@revoked" else known.trusted
        target.append((list(entry.hostnames), entry.key))
    return known


def _names_match(names: list[str], hostname: str) -> bool:
    """OpenSSH host patterns: hashed `|1|salt|hash`, wildcards `*` `?`, negation `!pat`
    (a negated match wins)."""
    import fnmatch

    from paramiko.hostkeys import HostKeys

    matched = False
    for name in names:
        negated = name.startswith("!")
        pattern = name[1:] if negated else name
        if pattern.startswith("|1|"):
            hit = HostKeys.hash_host(hostname, pattern) == pattern
        else:
            hit = fnmatch.fnmatchcase(hostname.lower(), pattern.lower())
        if hit and negated:
            return False
        matched = matched or hit
    return matched


class StrictPolicy:
    """Refuse hosts whose key is not in known_hosts (paramiko's RejectPolicy, with a reason)."""

    def __init__(self, host: str, known_hosts: Path, known: KnownHosts | None = None):
        self.host, self.known_hosts = host, known_hosts
        self.known = known or KnownHosts(known_hosts)

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        if self.known.is_revoked(hostname, key):
            raise RevokedHostKey(self.host, hostname, key, self.known_hosts)
        if self.known.trusts_by_pattern(hostname, key):
            return
        hint = ""
        if self.known.cert_authorities:
            hint = (f" ({self.known.cert_authorities} @cert-authority line(s) skipped: "
                    "ascendctl's SSH transport does not verify host certificates, so the "
                    "host's own key must be listed)")
        raise UnknownHostKey(self.host, hostname, key, self.known_hosts, hint)


class AcceptNewPolicy(StrictPolicy):
    """Record an unknown host's key in known_hosts and accept it (never a revoked one)."""

    def __init__(self, host: str, known_hosts: Path, known: KnownHosts | None = None):
        super().__init__(host, known_hosts, known)
        self.recorded: list[str] = []

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        if self.known.is_revoked(hostname, key):
            raise RevokedHostKey(self.host, hostname, key, self.known_hosts)
        if self.known.trusts_by_pattern(hostname, key):
            return
        append_known_host(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.recorded.append(f"{hostname} {key.get_name()} {fingerprint(key)}")


def append_known_host(path: Path, hostname: str, key: Any) -> None:
    """Append one `host keytype base64` line, serialised across threads and processes.
    A file whose last line has no final newline gets one first, so the new entry never
    joins (and corrupts) the last one."""
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _append_lock:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Another process may have recorded this host between our check and now.
            if line.strip() not in _read_lines(path):
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = "\n" + line
                os.write(fd, line.encode())
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_lines(path: Path) -> set[str]:
    return {ln.strip() for ln in read_known_hosts_text(path).splitlines()}


def configure_client(client: Any, host: str, known_hosts: str, checking: str) -> Any:
    """Load the known_hosts file into a paramiko SSHClient and set the policy.

    Only the inventory's file is trusted (not also ~/.ssh/known_hosts), so what the
    inventory says is what is checked.
    """
    path = known_hosts_path(known_hosts)
    known = load_known_hosts(path)
    host_keys = client.get_host_keys()
    for names, key in known.trusted:
        if any(key == revoked for _, revoked in known.revoked):
            continue    # revoked wins: the host falls to the policy, which refuses it
        for name in names:
            host_keys.add(name, key.get_name(), key)
    policy_class = AcceptNewPolicy if checking == "accept-new" else StrictPolicy
    policy = policy_class(host, path, known)
    client.set_missing_host_key_policy(policy)
    return policy
