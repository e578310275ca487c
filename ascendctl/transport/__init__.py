"""SSH transport: one persistent connection per host, a bounded parallel executor,
strict host-key checking, and command lines built only from quoted arguments.

`Remote` (transport/remote.py) is what a connection can do; `HostConnection` is its SSH
implementation and `LocalRemote` runs on this machine. `HostPool` runs work over many
remotes (`SshPool` over SSH, `local_pool` locally).

Fabric and Paramiko are imported when a connection is first opened, not here, so that
importing this package costs nothing at CLI start-up.
"""

from ascendctl.transport.connection import HostConnection, SshSettings
from ascendctl.transport.errors import (
    CommandTimeout, ConnectError, ConnectionLost, ConnectKind, RemoteCommandError,
)
from ascendctl.transport.files import FileChange, put_file, read_file
from ascendctl.transport.pool import DEFAULT_FORKS, HostPool, SshPool, local_pool
from ascendctl.transport.quoting import become, join_argv, quote, sh_c, sh_s, with_env
from ascendctl.transport.remote import LocalRemote, Remote, RemoteCommands
from ascendctl.transport.results import CommandResult, HostResult, HostStatus

__all__ = [
    "CommandResult", "CommandTimeout", "ConnectError", "ConnectKind", "ConnectionLost",
    "DEFAULT_FORKS", "FileChange", "HostConnection", "HostPool", "HostResult", "HostStatus",
    "LocalRemote", "Remote", "RemoteCommandError", "RemoteCommands", "SshPool", "SshSettings",
    "become", "join_argv", "local_pool", "put_file", "quote", "read_file", "sh_c", "sh_s",
    "with_env",
]
