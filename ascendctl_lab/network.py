"""Lab networks: a management bridge and a "RoCE" bridge per lab, a network namespace per
node with one management veth (host0) and one veth per NPU (eth0..ethN-1) carrying
the NPU device IPs. All addresses are in 198.18.0.0/15: management 198.18.<index>.0/24,
RoCE 198.19.<index>.0/24, the host at .1 on both.

Many ports of one subnet in one namespace need arp_ignore/arp_announce and a routing
table per port (chosen by source address) so that port k really carries device IP k:
with port k down, device IP k is unreachable and traffic from it is not rerouted."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ascendctl_lab.hostcmd import run

FIRST_HOST = 11
ROCE_MTU = 4200
MGMT_IFNAME = "host0"
ROCE_IFPREFIX = "eth"
NETMASK = "255.255.255.0"


@dataclass(frozen=True)
class LabNet:
    index: int

    @property
    def mgmt_bridge(self) -> str:
        return f"asc{self.index}m"

    @property
    def roce_bridge(self) -> str:
        return f"asc{self.index}r"

    @property
    def mgmt_host_ip(self) -> str:
        return f"198.18.{self.index}.1"

    @property
    def roce_host_ip(self) -> str:
        return f"198.19.{self.index}.1"

    def mgmt_ip(self, rank: int) -> str:
        return f"198.18.{self.index}.{FIRST_HOST + rank}"

    def device_ip(self, rank: int, port: int, npus: int) -> str:
        return f"198.19.{self.index}.{FIRST_HOST + rank * npus + port}"

    def host_mgmt_veth(self, rank: int) -> str:
        return f"asc{self.index}n{rank}m"

    def host_roce_veth(self, rank: int, port: int) -> str:
        return f"asc{self.index}n{rank}r{port}"

    def max_nodes(self, npus: int) -> int:
        return (254 - FIRST_HOST + 1) // npus


def check_lab_address(address: str) -> None:
    """Every address the lab configures lies in 198.18.0.0/15 (a benchmarking range)."""
    if ipaddress.ip_address(address) not in ipaddress.ip_network("198.18.0.0/15"):
        raise ValueError(f"{address} is outside 198.18.0.0/15")


def link_exists(name: str, netns: str | None = None) -> bool:
    argv = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", name]
    return run(argv, check=False).returncode == 0


def stable_mac(name: str) -> str:
    """A fixed, locally administered MAC for a lab link, as real NICs keep theirs. Left to
    the kernel, a bridge takes the lowest MAC of its ports and a veth gets a random one,
    so both change whenever a node powers off and on: the other nodes' ARP entries then
    go stale and their pings and replies are lost for seconds."""
    import hashlib

    digest = hashlib.sha256(name.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


bridge_mac = stable_mac


def ensure_bridge(name: str, address: str) -> None:
    check_lab_address(address)
    if not link_exists(name):
        run(["ip", "link", "add", name, "type", "bridge"])
        run(["ip", "addr", "add", f"{address}/24", "dev", name])
    run(["ip", "link", "set", name, "address", bridge_mac(name)])
    run(["ip", "link", "set", name, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "del", name], check=False)


def netns_exists(name: str) -> bool:
    return run(["ip", "netns", "pids", name], check=False).returncode == 0


def attach_netns(name: str, pid: int) -> None:
    """Name the network namespace of process PID (a node's PID 1) for `ip -n NAME`."""
    if netns_exists(name):
        run(["ip", "netns", "del", name], check=False)
    run(["ip", "netns", "attach", name, str(pid)])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def delete_netns(name: str) -> None:
    if netns_exists(name):
        run(["ip", "netns", "del", name], check=False)


def _sysctl(netns: str, settings: dict[str, str]) -> None:
    run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w"]
        + [f"{k}={v}" for k, v in settings.items()])


def ensure_veth(host_name: str, node_name: str, netns: str, bridge: str, mtu: int) -> None:
    if not link_exists(node_name, netns):
        if link_exists(host_name):
            run(["ip", "link", "del", host_name])
        run(["ip", "link", "add", host_name, "address", stable_mac(host_name), "mtu", str(mtu),
             "type", "veth", "peer", "name", node_name, "address",
             stable_mac(host_name + "/node"), "mtu", str(mtu), "netns", netns])
    run(["ip", "link", "set", host_name, "master", bridge, "up"])


def configure_mgmt(net: LabNet, rank: int, netns: str) -> None:
    ensure_veth(net.host_mgmt_veth(rank), MGMT_IFNAME, netns, net.mgmt_bridge, 1500)
    address = net.mgmt_ip(rank)
    check_lab_address(address)
    run(["ip", "-n", netns, "addr", "replace", f"{address}/24", "dev", MGMT_IFNAME])
    run(["ip", "-n", netns, "link", "set", MGMT_IFNAME, "up"])


def port_table(port: int) -> int:
    return 100 + port


def configure_port_routing(netns: str, port: int, address: str) -> None:
    """Source-based routing for one RoCE port (idempotent; re-run after link up)."""
    ifname = f"{ROCE_IFPREFIX}{port}"
    subnet = str(ipaddress.ip_interface(f"{address}/24").network)
    table = str(port_table(port))
    run(["ip", "-n", netns, "route", "replace", subnet, "dev", ifname, "src", address,
         "table", table], check=False)
    rules = run(["ip", "-n", netns, "rule", "show"]).stdout
    if f"from {address} lookup {table}" not in rules:
        run(["ip", "-n", netns, "rule", "add", "from", address, "table", table,
             "pref", str(1000 + port)])
    if f"from {address} unreachable" not in rules:
        run(["ip", "-n", netns, "rule", "add", "from", address, "unreachable",
             "pref", str(2000 + port)])


def flush_port_rules(netns: str, port: int) -> None:
    for pref in (1000 + port, 2000 + port):
        while run(["ip", "-n", netns, "rule", "del", "pref", str(pref)],
                  check=False).returncode == 0:
            pass
    run(["ip", "-n", netns, "route", "flush", "table", str(port_table(port))], check=False)


def configure_roce(net: LabNet, rank: int, netns: str, npus: int, mtu: int = ROCE_MTU,
                   addresses: dict[int, str | None] | None = None) -> None:
    """Create/repair every RoCE port of a node: veth, MTU, address, link up, routing."""
    _sysctl(netns, {"net.ipv4.conf.all.arp_ignore": "1",
                    "net.ipv4.conf.all.arp_announce": "2",
                    "net.ipv4.conf.all.rp_filter": "0",
                    "net.ipv4.conf.default.rp_filter": "0"})
    for port in range(npus):
        ifname = f"{ROCE_IFPREFIX}{port}"
        ensure_veth(net.host_roce_veth(rank, port), ifname, netns, net.roce_bridge, mtu)
        run(["ip", "-n", netns, "link", "set", ifname, "mtu", str(mtu)])
        run(["ip", "link", "set", net.host_roce_veth(rank, port), "mtu", str(mtu)])
        _sysctl(netns, {f"net.ipv4.conf.{ifname}.rp_filter": "0"})
        address = (addresses or {}).get(port, net.device_ip(rank, port, npus))
        run(["ip", "-n", netns, "addr", "flush", "dev", ifname])
        flush_port_rules(netns, port)
        run(["ip", "-n", netns, "link", "set", ifname, "up"])
        if address:
            check_lab_address(address)
            run(["ip", "-n", netns, "addr", "add", f"{address}/24", "dev", ifname])
            configure_port_routing(netns, port, address)
