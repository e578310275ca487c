"""Host network checks: the HCCL/Gloo socket NIC, and the head reachable on the launch ports."""

from __future__ import annotations

from typing import Mapping

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import cluster_check, node_check
from ascendctl.facts.node import NodeFacts

SLOW_NIC_MBPS = 1000


@node_check(
    "net.socket_nic", category="network", severity=Severity.FAIL,
    title="HCCL/Gloo NIC carries the named address",
    catches="HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME naming a NIC that does not exist, is down, is "
            "loopback, does not carry HCCL_IF_IP, or is a 1 GbE management NIC (hang at the first "
            "collective)",
    remediation="Set the socket NIC to the interface that carries the node's cluster address "
                "(`ip -br addr`), on a fast NIC",
)
def socket_nic(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    ne = exp.node(node)
    if not ne.socket_ifname and not ne.socket_ip:
        return Outcome.skip("the inventory names no socket NIC or HCCL_IF_IP for this node")
    if not facts.interfaces:
        return Outcome(Status.FAIL, "could not list interfaces (" + (facts.problem("ip_addr") or "ip -j addr") + ")",
                       "Install iproute2")
    names = ", ".join(i.name for i in facts.interfaces)
    carrier = facts.interface_with(ne.socket_ip) if ne.socket_ip else None
    iface = facts.interface(ne.socket_ifname) if ne.socket_ifname else carrier
    if iface is None:
        if ne.socket_ifname:
            fix = f"set the socket NIC to {carrier.name}" if carrier else f"use one of: {names}"
            return Outcome(Status.FAIL, f"NIC {ne.socket_ifname} does not exist (NICs: {names})", fix)
        return Outcome(Status.FAIL, f"no NIC carries {ne.socket_ip} (NICs: {names})",
                       f"Correct HCCL_IF_IP in the inventory, or add the address: ip addr add {ne.socket_ip}/<len> dev <nic>")
    if iface.is_loopback:
        return Outcome(Status.FAIL, f"socket NIC {iface.name} is loopback: other nodes cannot reach it",
                       f"set the socket NIC to {carrier.name}" if carrier and not carrier.is_loopback
                       else "name the NIC that carries the node's cluster address")
    if ne.socket_ip and not iface.has_address(ne.socket_ip):
        have = ", ".join(a.address for a in iface.addresses) or "no address"
        fix = (f"set HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME/TP_SOCKET_IFNAME={carrier.name}" if carrier
               else f"ip addr add {ne.socket_ip}/<len> dev {iface.name}  # or fix HCCL_IF_IP")
        return Outcome(Status.FAIL, f"NIC {iface.name} does not carry {ne.socket_ip} ({have})", fix)
    if not iface.is_up:
        return Outcome(Status.FAIL, f"NIC {iface.name} is {iface.operstate or 'down'}",
                       f"ip link set {iface.name} up  # and check its cable")
    if iface.speed_mbps is not None and 0 < iface.speed_mbps <= SLOW_NIC_MBPS:
        return Outcome(Status.FAIL, f"NIC {iface.name} runs at {iface.speed_mbps} Mb/s (a management NIC?)",
                       "Use the high-speed NIC for HCCL/Gloo/TP sockets")
    speed = f", {iface.speed_mbps} Mb/s" if iface.speed_mbps else ""
    return Outcome.ok(f"{iface.name} up{speed}" + (f", carries {ne.socket_ip}" if ne.socket_ip else ""))


@cluster_check(
    "net.head_ports", category="network", severity=Severity.FAIL,
    title="head reachable on the launch ports",
    catches="a follower that cannot open TCP connections to the head's launch ports (API server, "
            "--data-parallel-rpc-port, --master-port, Ray GCS): a firewall dropping them, no route",
    remediation="Open the ports on the head (`firewall-cmd --add-port=P/tcp --permanent; firewall-cmd "
                "--reload`) and check the route between the nodes",
)
def head_ports(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for node, f in facts.items():
        if not exp.head or not exp.launch_ports or not exp.head_address:
            out[node] = Outcome.skip("no head or launch ports in the inventory")
        elif node == exp.head:
            out[node] = Outcome.skip("this node is the head")
        elif exp.head not in facts:
            out[node] = Outcome.skip(f"head {exp.head} unreachable (see host.reachable)")
        else:
            probes = [p for p in f.probes if p.host == exp.head_address and p.port in exp.launch_ports]
            if not probes:
                out[node] = Outcome.skip("the head's ports were not probed")
                continue
            bad = [p for p in probes if not p.reachable]
            if bad:
                ports = " ".join(str(p.port) for p in bad)
                out[node] = Outcome(Status.FAIL,
                                    f"cannot reach {exp.head_address} on " + ", ".join(
                                        f"{p.port} ({p.result})" for p in bad),
                                    f"on {exp.head}: for p in {ports}; do firewall-cmd --add-port=$p/tcp "
                                    f"--permanent; done; firewall-cmd --reload  # or the iptables equivalent")
            else:
                out[node] = Outcome.ok(f"{exp.head_address} answers on " + " ".join(str(p.port) for p in probes))
    return out
