"""Where a node's listeners bind: the engine's --host, the exporter's --listen and the
gateway's nginx `listen`.

A node whose ansible_host is an IPv6 address listens on `::`, dual-stack: the proxy,
Prometheus and the agents connect to that address, and the node's own probes still reach
127.0.0.1. Every other node listens on 0.0.0.0 as before, not on `::` too: vLLM cannot
fall back where a kernel has no IPv6 (`::` then fails with EAFNOSUPPORT, and nginx
refuses to start), and an IPv4 cluster's API would appear on IPv6 addresses that its
firewall may not cover.
"""

from __future__ import annotations

from ascendctl_runtime.listener import ANY_DUAL_STACK, ANY_IPV4, is_ipv6

from ascendctl.inventory import Host


def serves_ipv6(host: Host) -> bool:
    """Whatever connects to HOST connects over IPv6."""
    return is_ipv6(host.address)


def listen_address(host: Host) -> str:
    """The wildcard address HOST's listeners bind."""
    return ANY_DUAL_STACK if serves_ipv6(host) else ANY_IPV4
