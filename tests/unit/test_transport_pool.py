"""The connection pool against real loopback sockets: refused, silent, per-host results,
bounded parallelism, retries with back-off, and Ctrl-C."""

from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from ascendctl.inventory.hosts import Host
from ascendctl.inventory.model import SshSpec
from ascendctl.transport import ConnectError, ConnectKind, HostStatus, SshPool


def make_host(name: str, port: int, rank: int = 0, **ssh) -> Host:
    spec = SshSpec(port=port, connect_timeout=ssh.pop("connect_timeout", 1.0),
                   connect_retries=ssh.pop("connect_retries", 0), **ssh)
    return Host(name=name, address="127.0.0.1", rank=rank, ip=f"198.18.9.{10 + rank}",
                nic=None, device_ips=None, ssh=spec, groups=("all",))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_server():
    """Accepts TCP connections and never says a word (no SSH banner)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def test_refused_host_is_unreachable_and_fast_and_does_not_hide_others(silent_server):
    hosts = [make_host("refused", closed_port(), 0),
             make_host("silent", silent_server, 1, connect_timeout=1.5)]
    started = time.monotonic()
    with SshPool(hosts, forks=4) as pool:
        results = pool.run(["true"])
    elapsed = time.monotonic() - started
    assert list(results) == ["refused", "silent"]
    refused, silent = results["refused"], results["silent"]
    assert refused.status is HostStatus.UNREACHABLE
    assert refused.error_kind == ConnectKind.REFUSED
    assert "connection refused" in refused.error
    assert refused.duration < 1.0
    assert silent.status is HostStatus.UNREACHABLE
    assert silent.error_kind == ConnectKind.TIMEOUT
    assert "1.5s" in silent.error
    assert 1.4 <= silent.duration < 3.0     # within the connect timeout (+ slack)
    assert elapsed < 3.5                    # in parallel, not one after the other


def test_unreachable_host_fails_fast_afterwards_without_reconnecting():
    host = make_host("refused", closed_port())
    with SshPool([host]) as pool:
        pool.run(["true"])
        conn = pool.conn("refused")
        attempts = conn.stats.connect_attempts
        again = pool.run(["true"])
        assert again["refused"].status is HostStatus.UNREACHABLE
        assert conn.stats.connect_attempts == attempts
        assert pool.exec_counts() == {"refused": 0}


def test_retries_back_off_with_jitter_on_transient_errors():
    host = make_host("refused", closed_port(), connect_retries=2)
    with SshPool([host]) as pool:
        started = time.monotonic()
        with pytest.raises(ConnectError) as info:
            pool.conn("refused").open()
        elapsed = time.monotonic() - started
    assert info.value.attempts == 3
    assert pool.conn("refused").stats.connect_attempts == 3
    assert "after 3 attempts" in str(info.value)
    # two back-offs: 0.25-0.5 s then 0.5-1 s
    assert 0.7 <= elapsed < 2.5


def test_map_bounds_parallelism_by_forks_and_keeps_host_order():
    hosts = [make_host(f"n{i}", 1 + i, i) for i in range(6)]
    running = 0
    peak = 0
    lock = threading.Lock()

    def work(conn):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.15)
        with lock:
            running -= 1
        return conn.name.upper()

    with SshPool(hosts, forks=2) as pool:
        results = pool.map(work)
    assert peak == 2
    assert list(results) == [f"n{i}" for i in range(6)]
    assert [r.value for r in results.values()] == [f"N{i}" for i in range(6)]
    assert all(r.ok for r in results.values())


def test_an_exception_on_one_host_is_that_hosts_failure_only():
    hosts = [make_host("a", 1, 0), make_host("b", 2, 1)]

    def work(conn):
        if conn.name == "a":
            raise RuntimeError("boom")
        return 42

    with SshPool(hosts) as pool:
        results = pool.map(work)
    assert results["a"].status is HostStatus.FAILED and "boom" in results["a"].error
    assert results["b"].ok and results["b"].value == 42


def test_ctrl_c_closes_connections_and_stops_waiting(silent_server):
    hosts = [make_host(f"s{i}", silent_server, i, connect_timeout=30) for i in range(3)]
    pool = SshPool(hosts, forks=3)
    main = threading.get_ident()
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        pool.run(["true"])
    assert time.monotonic() - started < 5      # not the 30 s connect timeout
    assert pool.cancel.is_set()
    with pytest.raises(ConnectError) as info:
        pool.conn("s0").open()
    assert info.value.kind == ConnectKind.INTERRUPTED
    pool.close()
