"""The node's HTTP listener (ascendctl_runtime.listener) and the real exporter with its
node agent bound through it: `::` answers on [::1] and on 127.0.0.1 (dual-stack), 0.0.0.0
on IPv4 only, and a kernel without the address family falls back to IPv4.

Every server here is bound on this machine and reached on loopback only."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ascendctl_runtime import listener
from ascendctl_runtime.listener import bound_address, http_server, is_ipv6, is_unspecified_ipv6

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Echo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def get(host: str, port: int, path: str = "/") -> tuple[int, bytes]:
    from ascendctl_runtime.nodeutil import http_url

    try:
        with NO_PROXY.open(http_url(host, port, path), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def refused(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        return sock.connect_ex((host, port)) == errno.ECONNREFUSED


@contextlib.contextmanager
def serving(address: str) -> Iterator[tuple[ThreadingHTTPServer, str]]:
    server, note = http_server(address, 0, Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, note
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("text, v6, unspecified", [
    ("::", True, True), ("0::0", True, True), ("::1", True, False),
    ("2001:db8::1", True, False), ("0.0.0.0", False, False), ("127.0.0.1", False, False),
    ("node0", False, False), ("[::]", False, False), ("", False, False),
])
def test_which_addresses_are_ipv6(text, v6, unspecified):
    assert (is_ipv6(text), is_unspecified_ipv6(text)) == (v6, unspecified)


def test_the_dual_stack_wildcard_answers_on_both_loopbacks():
    with serving("::") as (server, note):
        host, port = bound_address(server)
        assert (host, note) == ("::", "")
        assert server.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert get("::1", port) == (200, b"::1")
        # IPv4 arrives on the same socket, mapped
        assert get("127.0.0.1", port) == (200, b"::ffff:127.0.0.1")


def test_the_ipv4_wildcard_refuses_ipv6():
    """What the exporter did before for every node: [::1] finds nobody listening."""
    with serving("0.0.0.0") as (server, _):
        _, port = bound_address(server)
        assert get("127.0.0.1", port) == (200, b"127.0.0.1")
        assert refused("::1", port)


def test_a_specific_ipv6_address_is_bound_as_given():
    with serving("::1") as (server, _):
        host, port = bound_address(server)
        assert host == "::1" and get("::1", port)[0] == 200
        assert refused("127.0.0.1", port)


def test_without_the_address_family_the_wildcard_falls_back_to_ipv4(monkeypatch):
    """This kernel has IPv6; a family number no kernel knows makes socket() fail with the
    same EAFNOSUPPORT a kernel booted with ipv6.disable=1 gives for AF_INET6."""
    unknown_family = 255
    with pytest.raises(OSError) as raised:
        socket.socket(unknown_family, socket.SOCK_STREAM)
    assert raised.value.errno == errno.EAFNOSUPPORT
    monkeypatch.setattr(listener.IPv6HTTPServer, "address_family", unknown_family)
    with serving("::") as (server, note):
        host, port = bound_address(server)
        assert host == "0.0.0.0" and "IPv6 is not available" in note
        assert get("127.0.0.1", port)[0] == 200
    # a specific IPv6 address has no IPv4 stand-in: the error is the node's to see
    with pytest.raises(OSError):
        http_server("::1", 0, Echo)


def test_a_port_in_use_is_an_error_not_a_fallback():
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as taken:
        taken.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        taken.bind(("::", 0))
        taken.listen()
        with pytest.raises(OSError) as raised:
            http_server("::", taken.getsockname()[1], Echo)
        assert raised.value.errno == errno.EADDRINUSE


# -- the real exporter and node agent ---------------------------------------------------

def start_exporter(tmp_path: Path, listen: str) -> tuple[subprocess.Popen, int, str]:
    """`python -m ascendctl_runtime.exporter --listen LISTEN --port 0 --agent ...`: the
    process, the port it bound and what it said until then."""
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({
        "cluster": "v6", "node": "n0", "rank": 0, "release": "r1", "root": str(tmp_path),
        "units": [], "plan_url": "http://127.0.0.1:9/health/plan", "is_head": False}))
    env = {**os.environ, "PATH": str(tmp_path)}     # no npu-smi: the metrics say so
    process = subprocess.Popen(
        [sys.executable, "-m", "ascendctl_runtime.exporter", "--listen", listen,
         "--port", "0", "--agent", str(config)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    said = b""
    found = None
    deadline = time.monotonic() + 30
    assert process.stderr is not None
    while found is None:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([process.stderr], [], [], max(0.0, remaining))
        chunk = os.read(process.stderr.fileno(), 4096) if ready else b""
        if not chunk:
            process.kill()
            process.wait()
            raise AssertionError(f"the exporter did not start: {said.decode()}")
        said += chunk
        # the agent's thread logs too, its line may come before this one's newline
        found = re.search(rb"serving /metrics and /health on (\S+):(\d+)(?=\D)", said)
    return process, int(found.group(2)), said.decode()


@pytest.fixture
def exporter(tmp_path, request) -> Iterator[tuple[int, str]]:
    process, port, said = start_exporter(tmp_path, request.param)
    try:
        yield port, said
    finally:
        process.terminate()
        process.wait(timeout=15)


@pytest.mark.parametrize("exporter", ["::"], indirect=True)
def test_the_exporter_and_agent_on_dual_stack_answer_on_both_loopbacks(exporter):
    port, said = exporter
    assert f"and /health on [::]:{port}" in said
    for host in ("::1", "127.0.0.1"):
        status, body = get(host, port, "/health/state")
        assert status == 200 and json.loads(body)["node"] == "n0"
        status, body = get(host, port, "/metrics")
        assert status == 200 and b"\nascendctl_npu_smi_up 0\n" in body   # no npu-smi here


@pytest.mark.parametrize("exporter", ["0.0.0.0"], indirect=True)
def test_the_exporter_on_ipv4_says_so_and_refuses_ipv6(exporter):
    port, said = exporter
    assert f"on 0.0.0.0:{port}" in said
    assert get("127.0.0.1", port, "/health/state")[0] == 200
    assert refused("::1", port)
