"""One persistent SSH connection per host; every command is a channel on it.

A `HostConnection` opens a Fabric `Connection` (so ~/.ssh/config is honoured: HostName,
IdentityFile, ProxyJump, ProxyCommand) the first time it is used, keeps its Paramiko
Transport open, and runs each command on a fresh channel of that transport: no
reconnect per command. Host keys are checked by our own policy (fabric's default would
auto-add them), and jump hosts are opened by us so that they are checked too.
"""

from __future__ import annotations

import os
import random
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ascendctl.transport import quoting
from ascendctl.transport.classify import classify_connect_error
from ascendctl.transport.errors import ConnectError, ConnectionLost, ConnectKind
from ascendctl.transport.hostkeys import AcceptNewPolicy, configure_client
from ascendctl.transport.remote import RemoteCommands
from ascendctl.transport.results import CommandResult

if TYPE_CHECKING:
    from ascendctl.inventory import Host
    from ascendctl.inventory.model import SshSpec

READ_CHUNK = 65536
SEND_CHUNK = 32768
# After the exit status arrives, wait this long for EOF; a background child that keeps
# stdout open must not make the command hang until its timeout.
EOF_GRACE_S = 0.25


@dataclass
class SshSettings:
    """Everything needed to reach one SSH endpoint (a node or a jump host)."""

    name: str                 # inventory name (for messages)
    address: str
    port: int
    user: str
    key: Optional[str]        # private key file; None = agent + default keys + ssh config
    known_hosts: str
    host_key_checking: str
    connect_timeout: float
    connect_retries: int
    command_timeout: float
    sudo: bool
    jump: tuple[str, ...] = ()       # ProxyJump hops, outermost first
    proxy_command: Optional[str] = None
    # Whether the inventory gave user/port itself; if not, ~/.ssh/config's User/Port win.
    user_explicit: bool = True
    port_explicit: bool = True
    become: Optional[bool] = None

    def apply_ssh_config(self, cfg: Mapping[str, Any]) -> None:
        if not self.user_explicit and cfg.get("user"):
            self.user = str(cfg["user"])
        if not self.port_explicit and cfg.get("port"):
            self.port = int(cfg["port"])
        self.sudo = self.user != "root" if self.become is None else self.become

    @classmethod
    def for_host(cls, host: "Host", *, connect_timeout: float | None = None,
                 command_timeout: float | None = None) -> "SshSettings":
        spec: "SshSpec" = host.ssh
        return cls(
            name=host.name, address=host.address, port=spec.port, user=spec.user,
            key=os.path.expanduser(spec.private_key) if spec.private_key else None,
            known_hosts=spec.known_hosts, host_key_checking=spec.host_key_checking,
            connect_timeout=connect_timeout or spec.connect_timeout,
            connect_retries=spec.connect_retries,
            command_timeout=command_timeout or spec.command_timeout,
            sudo=spec.uses_sudo,
            jump=tuple(h.strip() for h in spec.jump_host.split(",")) if spec.jump_host else (),
            user_explicit="user" in spec.model_fields_set,
            port_explicit="port" in spec.model_fields_set, become=spec.become,
        )


def parse_hop(hop: str) -> tuple[Optional[str], str, Optional[int]]:
    """`[user@]host[:port]` → (user, host, port)."""
    user = None
    if "@" in hop:
        user, hop = hop.rsplit("@", 1)
    port = None
    if hop.startswith("["):
        host, _, rest = hop[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
        return user, host, port
    if hop.count(":") == 1:
        hop, port_text = hop.split(":")
        port = int(port_text)
    return user, hop, port


class SshConfigSource:
    """~/.ssh/config (and /etc/ssh/ssh_config), loaded once through Fabric's Config."""

    def __init__(self, path: str | None = None):
        self._path = path
        self._config: Any = None
        self._lock = threading.Lock()

    def fabric_config(self) -> Any:
        with self._lock:
            if self._config is None:
                from fabric import Config

                kwargs: dict[str, Any] = {}
                if self._path:
                    kwargs["runtime_ssh_path"] = self._path
                self._config = Config(**kwargs)
            return self._config

    def lookup(self, host: str) -> dict[str, Any]:
        return dict(self.fabric_config().base_ssh_config.lookup(host))


class JumpHosts:
    """Jump-host connections, opened once and shared by every host behind them."""

    def __init__(self, ssh_config: SshConfigSource, cancel: threading.Event):
        self._ssh_config = ssh_config
        self._cancel = cancel
        self._conns: dict[tuple[Any, ...], "HostConnection"] = {}
        self._lock = threading.Lock()

    def channel_to(self, target: SshSettings, address: str, port: int) -> Any:
        """A direct-tcpip channel to address:port through target's hops."""
        hop_conn = self._connection(target.jump, target)
        transport = hop_conn.transport
        try:
            return transport.open_channel("direct-tcpip", (address, int(port)), ("", 0),
                                          timeout=target.connect_timeout)
        except Exception as exc:  # noqa: BLE001 - classified below
            err = classify_connect_error(exc, host=target.name, address=address, port=port,
                                         user=target.user, timeout=target.connect_timeout,
                                         key=target.key, known_hosts=target.known_hosts)
            raise ConnectError(target.name, err.kind,
                               f"via jump host {target.jump[-1]}: {err.reason}") from None

    def _connection(self, hops: tuple[str, ...], target: SshSettings) -> "HostConnection":
        key = (hops, target.key, target.known_hosts, target.host_key_checking)
        with self._lock:
            conn = self._conns.get(key)
            if conn is None:
                user, address, port = parse_hop(hops[-1])
                cfg = self._ssh_config.lookup(address)
                settings = SshSettings(
                    name=f"jump host {hops[-1]}", address=cfg.get("hostname", address),
                    port=port or int(cfg.get("port", 22)), user=user or cfg.get("user")
                    or target.user, key=target.key, known_hosts=target.known_hosts,
                    host_key_checking=target.host_key_checking,
                    connect_timeout=target.connect_timeout, connect_retries=0,
                    command_timeout=target.command_timeout, sudo=False, jump=hops[:-1])
                conn = HostConnection(settings, ssh_config=self._ssh_config, jumps=self,
                                      cancel=self._cancel, use_ssh_config_jump=False)
                self._conns[key] = conn
        try:
            conn.open()
        except ConnectError as err:
            raise ConnectError(target.name, err.kind,
                               f"jump host {hops[-1]}: {err.reason}") from None
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()


@dataclass
class ConnectionStats:
    executions: int = 0
    connects: int = 0          # TCP+SSH handshakes that succeeded (1 for a healthy host)
    connect_attempts: int = 0
    connect_seconds: float = 0.0
    commands: list[str] = field(default_factory=list)


class HostConnection(RemoteCommands):
    """A lazily opened, persistent SSH connection to one host: the SSH implementation of
    `ascendctl.transport.remote.Remote` (run / run_shell / run_script / write_file come
    from RemoteCommands, on top of `exec`)."""

    def __init__(self, settings: SshSettings, *, ssh_config: SshConfigSource | None = None,
                 jumps: JumpHosts | None = None, cancel: threading.Event | None = None,
                 use_ssh_config_jump: bool = True, record_commands: bool = False):
        self.settings = settings
        self.name = settings.name
        self._ssh_config = ssh_config or SshConfigSource()
        self._cancel = cancel or threading.Event()
        self._jumps = jumps or JumpHosts(self._ssh_config, self._cancel)
        self._use_ssh_config_jump = use_ssh_config_jump
        self._record = record_commands
        self._fabric: Any = None
        self._connecting: Any = None   # the Connection being opened (closed on Ctrl-C)
        self._failure: ConnectError | None = None
        self._open_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._closed = False
        self.stats = ConnectionStats()
        self.recorded_host_keys: list[str] = []

    # -- connecting ----------------------------------------------------------------------

    @property
    def exec_count(self) -> int:
        """Remote executions so far (one per channel): tests use it to prove round trips."""
        return self.stats.executions

    @property
    def transport(self) -> Any:
        self.open()
        return self._fabric.transport

    @property
    def is_open(self) -> bool:
        return bool(self._fabric is not None and self._fabric.is_connected)

    @property
    def failure(self) -> ConnectError | None:
        return self._failure

    def open(self) -> None:
        """Connect (with jittered retries on transient errors) unless already connected.

        A host that could not be reached keeps failing fast with the same error, so a
        dead node does not cost a connect timeout per task.
        """
        if self._fabric is not None and self._fabric.is_connected:
            return
        # Another thread may be connecting; wait for it, but not past an interrupt.
        while not self._open_lock.acquire(timeout=0.1):
            if self._closed or self._cancel.is_set():
                raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
        try:
            self._open_locked()
        finally:
            self._open_lock.release()

    def reconnect(self) -> None:
        """Forget a failure or a dropped connection and connect again (a node that was
        rebooted or powered back on). Raises ConnectError if it still cannot be reached."""
        while not self._open_lock.acquire(timeout=0.1):
            if self._closed or self._cancel.is_set():
                raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
        try:
            if self._fabric is not None:   # possibly a dead transport not yet noticed
                _close_quietly(self._fabric)
                self._fabric = None
            self._failure = None
            self._open_locked()
        finally:
            self._open_lock.release()

    def _open_locked(self) -> None:
        if self._fabric is not None and self._fabric.is_connected:
            return
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ConnectError(self.name, ConnectKind.INTERRUPTED, "connection closed")
        started = time.monotonic()
        attempts = self.settings.connect_retries + 1
        for attempt in range(1, attempts + 1):
            self.stats.connect_attempts += 1
            try:
                self._fabric = self._open_once()
                self.stats.connects += 1
                self.stats.connect_seconds += time.monotonic() - started
                return
            except ConnectError as caught:
                err = caught
                if self._cancel.is_set():
                    err = ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
                if not err.retryable or attempt == attempts or self._cancel.is_set():
                    self._failure = ConnectError(err.host, err.kind, err.reason,
                                                 attempts=attempt)
                    self.stats.connect_seconds += time.monotonic() - started
                    raise self._failure from None
                # Exponential back-off with full jitter, so nodes rebooting together
                # are not hammered in lock-step.
                delay = random.uniform(0.5, 1.0) * min(4.0, 0.5 * 2 ** (attempt - 1))
                if self._cancel.wait(delay):
                    self._failure = ConnectError(self.name, ConnectKind.INTERRUPTED,
                                                 "interrupted")
                    raise self._failure from None

    def _open_once(self) -> Any:
        from fabric import Connection

        _quiet_paramiko_logging()

        s = self.settings
        cfg = self._ssh_config.lookup(s.address)
        s.apply_ssh_config(cfg)
        timeout = s.connect_timeout
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": timeout, "auth_timeout": timeout, "channel_timeout": timeout,
        }
        conn = Connection(s.address, user=s.user, port=s.port,
                          config=self._ssh_config.fabric_config(), gateway=False,
                          connect_kwargs=connect_kwargs, inline_ssh_env=True)
        # Fabric truncates connect timeouts to whole seconds; keep ours exact.
        conn.connect_timeout = timeout
        if s.key:
            # The inventory names the key: use exactly that one (OpenSSH IdentitiesOnly).
            conn.connect_kwargs["key_filename"] = [s.key]
            conn.connect_kwargs["look_for_keys"] = False
            conn.connect_kwargs["allow_agent"] = False
        policy = configure_client(conn.client, self.name, s.known_hosts, s.host_key_checking)
        target = conn.host   # HostName from ssh config, if any
        self._connecting = conn
        started = time.monotonic()
        try:
            if self._closed:
                raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
            sock = self._proxy_socket(cfg, target, conn.port)
            if sock is None:
                sock = self._tcp_socket(target, conn.port, timeout)
            conn.connect_kwargs["sock"] = sock
            conn.open()
            conn.transport.set_keepalive(30)
        except BaseException as exc:
            _close_quietly(conn)
            if self._closed or self._cancel.is_set():
                raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted") from None
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise classify_connect_error(
                exc, host=self.name, address=target, port=conn.port, user=s.user,
                timeout=timeout, key=s.key, known_hosts=s.known_hosts,
                elapsed=time.monotonic() - started) from None
        finally:
            self._connecting = None
        if isinstance(policy, AcceptNewPolicy):
            self.recorded_host_keys.extend(policy.recorded)
        return conn

    def _tcp_socket(self, address: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection with Nagle off.

        SSH exchanges many small request/reply messages (channel open, exec, exit
        status); with Nagle on they wait out the peer's delayed ACK (~40 ms each), which
        makes a command take ten times as long.
        """
        sock = socket.create_connection((address, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _proxy_socket(self, cfg: Mapping[str, Any], address: str, port: int) -> Any:
        s = self.settings
        if s.jump:
            return self._jumps.channel_to(s, address, port)
        if not self._use_ssh_config_jump:
            return None
        jump = cfg.get("proxyjump")
        if jump and jump.lower() != "none":
            hops = tuple(h.strip() for h in jump.split(","))
            via = SshSettings(**{**s.__dict__, "jump": hops})
            return self._jumps.channel_to(via, address, port)
        command = cfg.get("proxycommand")
        if command and command.lower() != "none":
            from paramiko import ProxyCommand

            return ProxyCommand(command)
        return None

    # -- running -------------------------------------------------------------------------

    def exec(self, command: str, *, stdin: bytes | str | None = None,
             timeout: float | None = None) -> CommandResult:
        """Run one command line (already quoted) on a new channel; never raises on exit codes.

        Raises ConnectError when the host cannot be reached and ConnectionLost when the
        connection drops mid-command.
        """
        self.open()
        timeout = timeout or self.settings.command_timeout
        data = stdin.encode() if isinstance(stdin, str) else stdin
        with self._count_lock:
            self.stats.executions += 1
            if self._record:
                self.stats.commands.append(command)
        started = time.monotonic()
        transport = self._fabric.transport
        try:
            chan = transport.open_session(timeout=min(timeout, self.settings.connect_timeout
                                                      + 5))
        except Exception as exc:  # noqa: BLE001
            raise self._lost(f"could not open a channel: {exc}") from None
        try:
            chan.exec_command(command)
            return self._collect(chan, transport, command, data, timeout, started)
        except ConnectError:
            raise
        except (EOFError, OSError) as exc:
            raise self._lost(f"connection lost during a command: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - paramiko.SSHException and friends
            if not transport.is_active():
                raise self._lost(f"connection lost during a command: {exc}") from None
            raise
        finally:
            chan.close()

    def _lost(self, reason: str) -> ConnectError:
        if self._cancel.is_set() or self._closed:
            return ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
        return ConnectionLost(self.name, reason)

    def _collect(self, chan: Any, transport: Any, command: str, data: bytes | None,
                 timeout: float, started: float) -> CommandResult:
        out: list[bytes] = []
        err: list[bytes] = []
        pending = memoryview(data) if data else None
        sent = 0
        if pending is None:
            chan.shutdown_write()
        fd = chan.fileno()
        deadline = started + timeout
        exit_seen_at: float | None = None
        while True:
            if pending is not None:
                while sent < len(pending) and chan.send_ready():
                    n = chan.send(pending[sent:sent + SEND_CHUNK])
                    if n <= 0:
                        break
                    sent += n
                if sent >= len(pending) or chan.closed:
                    pending = None
                    if not chan.closed:
                        chan.shutdown_write()
            while chan.recv_ready():
                chunk = chan.recv(READ_CHUNK)
                if not chunk:
                    break
                out.append(chunk)
            while chan.recv_stderr_ready():
                chunk = chan.recv_stderr(READ_CHUNK)
                if not chunk:
                    break
                err.append(chunk)
            drained = not chan.recv_ready() and not chan.recv_stderr_ready()
            now = time.monotonic()
            if drained and (chan.eof_received or chan.closed):
                if chan.status_event.wait(max(0.0, deadline - now)):
                    break
                return self._timed_out(command, out, err, started, timeout)
            if chan.status_event.is_set() and drained:
                exit_seen_at = exit_seen_at or now
                if now - exit_seen_at >= EOF_GRACE_S:
                    break
            if now >= deadline:
                return self._timed_out(command, out, err, started, timeout)
            if self._cancel.is_set() or self._closed:
                raise ConnectError(self.name, ConnectKind.INTERRUPTED, "interrupted")
            if not transport.is_active():
                raise self._lost("connection lost during a command")
            wait = min(deadline - now, 0.02 if pending is not None else 1.0)
            if exit_seen_at is not None:
                wait = min(wait, EOF_GRACE_S / 5)
            select.select([fd], [], [], max(0.0, wait))
        status = chan.recv_exit_status() if chan.status_event.is_set() else None
        return CommandResult(host=self.name, command=command, exit_status=status,
                             stdout_bytes=b"".join(out), stderr_bytes=b"".join(err),
                             duration=time.monotonic() - started)

    def _timed_out(self, command: str, out: list[bytes], err: list[bytes], started: float,
                   timeout: float) -> CommandResult:
        return CommandResult(host=self.name, command=command, exit_status=None,
                             stdout_bytes=b"".join(out),
                             stderr_bytes=b"".join(err) + f"\n[ascendctl: timed out after "
                             f"{timeout:g}s]".encode(),
                             duration=time.monotonic() - started, timed_out=True)

    def become_command(self, command: str, become: bool | None) -> str:
        """The command wrapped in `sudo -n` when this host's user needs it (or `become`).

        Call after open(): the user may come from ~/.ssh/config."""
        sudo = self.settings.sudo if become is None else (become and self.settings.user
                                                           != "root")
        return quoting.become(command, sudo=sudo)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        self._closed = True
        for conn in (self._connecting, self._fabric):
            if conn is not None:
                _close_quietly(conn)
        self._fabric = None

    def __enter__(self) -> "HostConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _quiet_paramiko_logging() -> None:
    """Paramiko logs refused jump channels etc. to stderr; we report them per host."""
    import logging

    logger = logging.getLogger("paramiko")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a half-open connection may fail; ignore
        pass
