"""The known_hosts file an inventory names (ssh.known_hosts, ASCENDCTL_KNOWN_HOSTS): where
it is, and reading it the bounded way.

It is a regular file of at most MAX_KNOWN_HOSTS_BYTES, not there yet (accept-new creates
it), or /dev/null (nothing known); anything else (a FIFO would block the read) is refused
when the inventory loads (`check_known_hosts_file`) and again whenever it is read. What
its lines mean is the transport's business (ascendctl/transport/hostkeys.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendctl.inventory.inputfile import open_input_file, read_input_bytes

MAX_KNOWN_HOSTS_BYTES = 64 << 20    # about 90 000 RSA entries


def known_hosts_path(value: str) -> Path:
    return Path(os.path.expanduser(value))


def is_empty_by_design(path: Path) -> bool:
    """No file yet (accept-new creates it), or /dev/null (as with OpenSSH: nothing known)."""
    return not os.path.exists(path) or os.path.realpath(path) == os.devnull


def check_known_hosts_file(path: Path) -> None:
    """Refuse, before any host is contacted, a known_hosts that is a FIFO, a device other
    than /dev/null, a directory or larger than MAX_KNOWN_HOSTS_BYTES (nothing is read)."""
    if not is_empty_by_design(path):
        with open_input_file(path, what="known_hosts file", limit=MAX_KNOWN_HOSTS_BYTES):
            pass


def read_known_hosts_text(path: Path) -> str:
    """The known_hosts file as text ("" when it does not exist yet), read the bounded way."""
    if is_empty_by_design(path):
        return ""
    data = read_input_bytes(path, limit=MAX_KNOWN_HOSTS_BYTES, what="known_hosts file")
    return data.decode("utf-8", errors="replace")
