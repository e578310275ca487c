"""Bind a node's HTTP listener with the address family its address needs (standard
library only).

`::` is dual-stack: one IPv6 socket that also takes IPv4 connections (they arrive as
::ffff:a.b.c.d), whatever net.ipv6.bindv6only says. On a node where IPv6 is missing (a
kernel booted with ipv6.disable=1: not even an IPv6 socket can be made) it falls back to
0.0.0.0, IPv4 only, and says so. The controller renders `::` for a node whose
ansible_host is an IPv6 address (ascendctl/render/listen.py), 0.0.0.0 otherwise."""

from __future__ import annotations

import errno
import ipaddress
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Type

ANY_IPV4 = "0.0.0.0"
ANY_DUAL_STACK = "::"


class IPv4HTTPServer(ThreadingHTTPServer):
    daemon_threads = True


class IPv6HTTPServer(IPv4HTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        if is_unspecified_ipv6(self.server_address[0]):
            # dual-stack even where an administrator set net.ipv6.bindv6only=1
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def is_ipv6(address: str) -> bool:
    """ADDRESS is an IPv6 address (not a name, not IPv4)."""
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def is_unspecified_ipv6(address: str) -> bool:
    return is_ipv6(address) and ipaddress.IPv6Address(address).is_unspecified


def http_server(address: str, port: int,
                handler: Type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """A threading HTTP server bound to ADDRESS:PORT (port 0: any free one), and a note
    when it is not what was asked for (`::` on a node without IPv6: 0.0.0.0), else ''."""
    if not is_ipv6(address):
        return IPv4HTTPServer((address, port), handler), ""
    try:
        return IPv6HTTPServer((address, port), handler), ""
    except OSError as err:
        if err.errno != errno.EAFNOSUPPORT or not is_unspecified_ipv6(address):
            raise
    return (IPv4HTTPServer((ANY_IPV4, port), handler),
            f"IPv6 is not available on this node, listening on {ANY_IPV4} (IPv4) only")


def bound_address(server: ThreadingHTTPServer) -> tuple[str, int]:
    """The address and port the server listens on (the port chosen for port 0)."""
    host, port = server.server_address[:2]
    return str(host), int(port)
