"""RoCE checks: every NPU port on every node, and the ports across nodes.

A fault is reported once, by the check that names its cause: ports of NPUs npu-smi does
not show are left to `npu.count`; a port whose link is down or that has no IP is left to
`roce.link`/`roce.ip` by the checks that depend on them (net_health, ping, path MTU);
duplicated IPs are left to `roce.ip.unique` by `roce.ip.inventory` and the ping matrix.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import cluster_check, node_check
from ascendctl.facts.hccn import NET_HEALTH_OK
from ascendctl.facts.node import NodeFacts, RocePort

HCCN = "hccn_tool"


def driver_down(facts: NodeFacts) -> bool:
    """npu-smi answered with an error (e.g. -8005): hccn_tool answers nothing useful either."""
    return facts.npu_smi is not None and facts.npu_smi.error_code is not None


def present_ports(facts: NodeFacts, exp: Expectations) -> list[RocePort]:
    """Ports of NPUs that exist: device ids npu-smi shows (A3: the die Phy-IDs)."""
    if driver_down(facts):
        return []
    ports = [p for p in facts.roce if p.device < exp.roce_ports or not exp.roce_ports]
    info = facts.npu_smi
    if info is None or not info.ok or not info.chips:
        return ports
    if any(c.phy_id is not None for c in info.chips):
        devices = {c.phy_id for c in info.chips if c.phy_id is not None}
    elif exp.chips_per_npu > 1:
        devices = {c.npu_id * exp.chips_per_npu + c.chip_id for c in info.chips}
    else:
        devices = {c.npu_id for c in info.chips}
    return [p for p in ports if p.device in devices]


def usable(port: RocePort) -> bool:
    return port.link == "UP" and port.ip is not None


def _no_ports(facts: NodeFacts) -> Outcome | None:
    if driver_down(facts):
        return Outcome.skip("the NPU driver does not answer (see npu.smi)")
    if not facts.roce:
        return Outcome.skip("hccn_tool was not run")
    return None


@node_check(
    "roce.link", category="roce", severity=Severity.FAIL,
    title="every RoCE port link UP",
    catches="a RoCE port whose link is DOWN (cable, optics, switch port), or hccn_tool failing for it",
    remediation="Check the cable and switch port: `hccn_tool -i N -link_stat -g`, `hccn_tool -i N "
                "-optical -g`, `hccn_tool -i N -lldp -g`",
)
def link(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if driver_down(facts):
        return Outcome.skip("the NPU driver does not answer (see npu.smi)")
    if "hccn:link:0" in facts.missing or (facts.roce and all(
            p.errors and "rc=127" in " ".join(p.errors) for p in facts.roce)):
        return Outcome(Status.FAIL, "hccn_tool not found",
                       "Install the Ascend driver (hccn_tool is /usr/local/Ascend/driver/tools/hccn_tool)")
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = present_ports(facts, exp)
    down = [p for p in ports if p.link != "UP"]
    if down:
        d = down[0].device
        return Outcome(Status.FAIL,
                       "link not UP on device(s) " + ", ".join(
                           f"{p.device} ({p.link or 'unknown: ' + '; '.join(p.errors)[:80]})" for p in down),
                       f"{HCCN} -i {d} -link_stat -g; {HCCN} -i {d} -optical -g  # then check the cable "
                       f"and the switch port (`{HCCN} -i {d} -lldp -g`)")
    return Outcome.ok(f"{len(ports)} port(s) UP")


@node_check(
    "roce.ip", category="roce", severity=Severity.FAIL,
    title="every RoCE port has a device IP",
    catches="a port with no device IP (`hccn_tool -i N -ip -g` prints nothing)",
    remediation="hccn_tool -i N -ip -s address <ip> netmask <mask>",
)
def ip(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = present_ports(facts, exp)
    missing = [p for p in ports if p.ip is None]
    if missing:
        wanted = exp.node(node).device_ips
        p0 = missing[0]
        addr = wanted.get(p0.device, "<ip>")
        mask = exp.roce_netmask or next((p.netmask for p in ports if p.netmask), "<netmask>")
        return Outcome(Status.FAIL, "no device IP on device(s) " + ", ".join(str(p.device) for p in missing),
                       f"{HCCN} -i {p0.device} -ip -s address {addr} netmask {mask}")
    return Outcome.ok(f"{len(ports)} port(s) have an IP")


@node_check(
    "roce.netmask", category="roce", severity=Severity.FAIL,
    title="RoCE netmask set and consistent",
    catches="a port with an IP but no netmask, a netmask other than the inventory's, or mixed netmasks "
            "on one node",
    remediation="hccn_tool -i N -ip -s address <ip> netmask <mask>",
)
def netmask(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = [p for p in present_ports(facts, exp) if p.ip is not None]
    if not ports:
        return Outcome.skip("no port has an IP (see roce.ip)")
    expected = exp.roce_netmask
    if expected is None and any(p.netmask for p in ports):
        expected = Counter(p.netmask for p in ports if p.netmask).most_common(1)[0][0]
    bad = [p for p in ports if p.netmask is None or (expected and p.netmask != expected)]
    if bad:
        p0 = bad[0]
        return Outcome(Status.FAIL,
                       "netmask wrong on " + ", ".join(f"device {p.device} ({p.netmask or 'none'})" for p in bad)
                       + (f"; expected {expected}" if expected else ""),
                       f"{HCCN} -i {p0.device} -ip -s address {p0.ip} netmask {expected or '<netmask>'}")
    return Outcome.ok(f"netmask {expected} on {len(ports)} port(s)")


@node_check(
    "roce.mtu", category="roce", severity=Severity.FAIL,
    title="RoCE MTU as the inventory sets it",
    catches="a port whose MTU differs from the inventory's `roce_mtu` (9000 on one side and 1500 on "
            "the other makes collectives crawl or hang)",
    remediation="hccn_tool -i N -mtu -s mtu <mtu>",
)
def mtu(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if exp.roce_mtu is None:
        return Outcome.skip("no roce_mtu in the inventory: roce.mtu.uniform compares the nodes")
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = present_ports(facts, exp)
    bad = [p for p in ports if p.mtu != exp.roce_mtu]
    if bad:
        return Outcome(Status.FAIL,
                       "MTU " + ", ".join(f"{p.mtu} on device {p.device}" for p in bad)
                       + f"; expected {exp.roce_mtu}",
                       "; ".join(f"{HCCN} -i {p.device} -mtu -s mtu {exp.roce_mtu}" for p in bad))
    return Outcome.ok(f"MTU {exp.roce_mtu} on {len(ports)} port(s)")


@node_check(
    "roce.tls", category="roce", severity=Severity.FAIL,
    title="RoCE TLS switch as the inventory sets it",
    catches="TLS enabled on some ports and not others, or not as the inventory's `roce_tls` says "
            "(HCCL link setup fails between mismatched ports)",
    remediation="hccn_tool -i N -tls -s enable <0|1>",
)
def tls(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if exp.roce_tls is None:
        return Outcome.skip("no roce_tls in the inventory: roce.tls.uniform compares the nodes")
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = present_ports(facts, exp)
    bad = [p for p in ports if p.tls_enabled is not exp.roce_tls]
    want = int(exp.roce_tls)
    if bad:
        return Outcome(Status.FAIL,
                       "TLS " + ", ".join(f"{_tls_text(p.tls_enabled)} on device {p.device}" for p in bad)
                       + f"; expected {_tls_text(exp.roce_tls)}",
                       "; ".join(f"{HCCN} -i {p.device} -tls -s enable {want}" for p in bad))
    return Outcome.ok(f"TLS {_tls_text(exp.roce_tls)} on {len(ports)} port(s)")


def _tls_text(value: bool | None) -> str:
    return {True: "enabled", False: "disabled", None: "unknown"}[value]


@node_check(
    "roce.netdetect", category="roce", severity=Severity.WARN,
    title="netdetect address configured",
    catches="a port with no netdetect address (net_health then stays `Init` and cannot probe)",
    remediation="hccn_tool -i N -netdetect -s address <gateway or peer IP>",
)
def netdetect(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = [p for p in present_ports(facts, exp) if p.ip is not None]
    missing = [p for p in ports if p.netdetect is None]
    if missing:
        p0 = missing[0]
        target = exp.roce_gateway or p0.gateway or "<gateway ip>"
        return Outcome(Status.FAIL, "no netdetect address on device(s) " + ", ".join(str(p.device) for p in missing),
                       f"{HCCN} -i {p0.device} -netdetect -s address {target}")
    return Outcome.ok(f"netdetect set on {len(ports)} port(s)")


@node_check(
    "roce.net_health", category="roce", severity=Severity.FAIL,
    title="net_health Success",
    catches="a port whose `net health status` is not Success (Socket fail(ed), Receive timeout, "
            "Unreachable, Fault, ...)",
    remediation="Check the port's route to its netdetect address: `hccn_tool -i N -ping -g address "
                "<netdetect>`, `hccn_tool -i N -gateway -g`",
)
def net_health(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    skip = _no_ports(facts)
    if skip:
        return skip
    # a port carrying another port's address (per the inventory) is roce.ip.inventory's /
    # roce.ip.unique's finding; its probe answers go to the address's rightful owner
    wanted = exp.node(node).device_ips
    ports = [p for p in present_ports(facts, exp) if usable(p) and p.netdetect is not None
             and (p.device not in wanted or wanted[p.device] == p.ip)]
    if not ports:
        return Outcome.skip("no port is UP with its own IP and a netdetect address")
    bad = [p for p in ports if p.net_health != NET_HEALTH_OK]
    if bad:
        p0 = bad[0]
        return Outcome(Status.FAIL,
                       "net_health " + ", ".join(f"{p.net_health or 'unknown'} on device {p.device}" for p in bad),
                       f"{HCCN} -i {p0.device} -ping -g address {p0.netdetect}; {HCCN} -i {p0.device} -gateway -g")
    return Outcome.ok(f"net_health Success on {len(ports)} port(s)")


@node_check(
    "roce.gateway", category="roce", severity=Severity.WARN,
    title="RoCE gateway configured",
    catches="a port with no default gateway, or one other than the inventory's `roce_gateway`",
    remediation="hccn_tool -i N -gateway -s gateway <ip>",
)
def gateway(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    skip = _no_ports(facts)
    if skip:
        return skip
    ports = [p for p in present_ports(facts, exp) if p.ip is not None]
    bad = [p for p in ports if p.gateway is None or (exp.roce_gateway and p.gateway != exp.roce_gateway)]
    if bad:
        p0 = bad[0]
        want = exp.roce_gateway or "<gateway ip>"
        return Outcome(Status.FAIL,
                       "gateway " + ", ".join(f"{p.gateway or 'missing'} on device {p.device}" for p in bad),
                       f"{HCCN} -i {p0.device} -gateway -s gateway {want}")
    return Outcome.ok(f"gateway set on {len(ports)} port(s)")


# --- across nodes -----------------------------------------------------------------------

def _reference(values_by_node: Mapping[str, list], head: str | None):
    """The majority value over all ports; on a tie the head's (or first node's) majority."""
    counts = Counter(v for vs in values_by_node.values() for v in vs)
    if not counts:
        return None
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        ref_node = head if head is not None and head in values_by_node else sorted(values_by_node)[0]
        local = Counter(values_by_node[ref_node]).most_common(1)
        if local:
            return local[0][0]
    return ranked[0][0]


def _uniform(facts: Mapping[str, NodeFacts], exp: Expectations, attr: str, label: str,
             fix) -> dict[str, Outcome]:
    values = {n: [getattr(p, attr) for p in present_ports(f, exp) if getattr(p, attr) is not None]
              for n, f in facts.items()}
    ref = _reference(values, exp.head)
    out: dict[str, Outcome] = {}
    for node, f in facts.items():
        ports = [p for p in present_ports(f, exp) if getattr(p, attr) is not None]
        if ref is None or not ports:
            out[node] = Outcome.skip(f"no {label} reported")
            continue
        bad = [p for p in ports if getattr(p, attr) != ref]
        if bad:
            out[node] = Outcome(Status.FAIL,
                                f"{label} " + ", ".join(f"{_show(getattr(p, attr))} on device {p.device}"
                                                        for p in bad)
                                + f"; the rest of the cluster uses {_show(ref)}",
                                "; ".join(fix(p, ref) for p in bad))
        else:
            out[node] = Outcome.ok(f"{label} {_show(ref)} like the rest of the cluster")
    return out


def _show(value) -> str:
    if isinstance(value, bool):
        return _tls_text(value)
    return str(value)


@cluster_check(
    "roce.mtu.uniform", category="roce", severity=Severity.FAIL,
    title="same RoCE MTU on every port of every node",
    catches="MTU differing between ports or nodes when the inventory sets no `roce_mtu` (with it, "
            "roce.mtu reports the deviation instead)",
    remediation="hccn_tool -i N -mtu -s mtu <the cluster's MTU>",
)
def mtu_uniform(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    if exp.roce_mtu is not None:
        return {n: Outcome.skip(f"roce.mtu checks every port against {exp.roce_mtu}") for n in facts}
    return _uniform(facts, exp, "mtu", "MTU", lambda p, ref: f"{HCCN} -i {p.device} -mtu -s mtu {ref}")


@cluster_check(
    "roce.tls.uniform", category="roce", severity=Severity.FAIL,
    title="same TLS switch on every port of every node",
    catches="TLS enabled on one node and disabled on another (`hccn_tool -i N -tls -g | grep switch`) "
            "when the inventory sets no `roce_tls`",
    remediation="hccn_tool -i N -tls -s enable <0|1> (the same on every node)",
)
def tls_uniform(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    if exp.roce_tls is not None:
        return {n: Outcome.skip(f"roce.tls checks every port against {_tls_text(exp.roce_tls)}") for n in facts}
    return _uniform(facts, exp, "tls_enabled", "TLS",
                    lambda p, ref: f"{HCCN} -i {p.device} -tls -s enable {int(ref)}")


def _holders(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, list[tuple[str, RocePort]]]:
    holders: dict[str, list[tuple[str, RocePort]]] = {}
    for node, f in facts.items():
        for p in present_ports(f, exp):
            if p.ip:
                holders.setdefault(p.ip, []).append((node, p))
    return holders


def _wrong_duplicates(facts: Mapping[str, NodeFacts], exp: Expectations) -> set[tuple[str, int]]:
    """(node, device) holding a duplicated IP that is not theirs per the inventory."""
    wrong: set[tuple[str, int]] = set()
    for ip_addr, owners in _holders(facts, exp).items():
        if len(owners) < 2:
            continue
        rightful = [(n, p) for n, p in owners if exp.node(n).device_ips.get(p.device) == ip_addr]
        for n, p in owners:
            if (n, p) not in rightful or not rightful:
                wrong.add((n, p.device))
    return wrong


@cluster_check(
    "roce.ip.unique", category="roce", severity=Severity.FAIL,
    title="device IPs unique across the cluster",
    catches="the same device IP on two ports (on one node or two); with inventory IPs, only the "
            "port that should not have it is reported",
    remediation="hccn_tool -i N -ip -s address <its own ip> netmask <mask>",
)
def ip_unique(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    holders = _holders(facts, exp)
    wrong = _wrong_duplicates(facts, exp)
    out: dict[str, Outcome] = {}
    for node, f in facts.items():
        mine = [p for p in present_ports(f, exp) if (node, p.device) in wrong]
        if mine:
            p0 = mine[0]
            others: dict[str | None, list[str]] = {
                p.ip: [f"{n}/{q.device}" for n, q in holders[p.ip] if (n, q.device) != (node, p.device)]
                for p in mine if p.ip}      # every port in `wrong` has an IP
            want = exp.node(node).device_ips.get(p0.device, "<its own ip>")
            out[node] = Outcome(Status.FAIL,
                                "duplicated device IP: " + ", ".join(
                                    f"{p.ip} on device {p.device} (also on {', '.join(others[p.ip])})" for p in mine),
                                f"{HCCN} -i {p0.device} -ip -s address {want} netmask {p0.netmask or '<netmask>'}")
        elif not any(p.ip for p in present_ports(f, exp)):
            out[node] = Outcome.skip("no device IPs (see roce.ip)")
        else:
            out[node] = Outcome.ok("device IPs unique")
    return out


@cluster_check(
    "roce.ip.inventory", category="roce", severity=Severity.FAIL,
    title="device IPs match the inventory",
    catches="a port whose device IP differs from the one the inventory names (a typo, a swapped "
            "cable plan); missing and duplicated IPs are left to roce.ip and roce.ip.unique",
    remediation="hccn_tool -i N -ip -s address <inventory ip> netmask <mask>, or fix the inventory",
)
def ip_inventory(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    wrong = _wrong_duplicates(facts, exp)
    out: dict[str, Outcome] = {}
    for node, f in facts.items():
        wanted = exp.node(node).device_ips
        if not wanted:
            out[node] = Outcome.skip("the inventory names no device IPs for this node")
            continue
        bad = [p for p in present_ports(f, exp)
               if p.ip and p.device in wanted and p.ip != wanted[p.device] and (node, p.device) not in wrong]
        if bad:
            p0 = bad[0]
            out[node] = Outcome(Status.FAIL,
                                ", ".join(f"device {p.device} has {p.ip}, inventory says {wanted[p.device]}"
                                          for p in bad),
                                f"{HCCN} -i {p0.device} -ip -s address {wanted[p0.device]} netmask "
                                f"{p0.netmask or exp.roce_netmask or '<netmask>'}  # or fix the inventory")
        else:
            out[node] = Outcome.ok("device IPs match the inventory")
    return out


def _endpoint_ok(exp: Expectations, wrong: set, holders: dict, ip_addr: str) -> RocePort | None:
    """The port that owns `ip_addr` when it is a sound ping endpoint, else None."""
    owners = holders.get(ip_addr, [])
    if len(owners) != 1:
        return None
    node, port = owners[0]
    if (node, port.device) in wrong or not usable(port):
        return None
    wanted = exp.node(node).device_ips.get(port.device)
    if wanted and wanted != ip_addr:
        return None
    return port


@cluster_check(
    "roce.ping", category="roce", severity=Severity.FAIL,
    title="device-IP ping matrix",
    catches="a RoCE port that cannot reach the same-index port (or every port) of another node with "
            "`hccn_tool -i N -ping -g address X`, when both ends are up and addressed",
    remediation="Check routing/VLAN/switch config between the two ports: `hccn_tool -i N -ping -g "
                "address X`, `hccn_tool -i N -route -g`",
)
def ping(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    holders = _holders(facts, exp)
    wrong = _wrong_duplicates(facts, exp)
    out: dict[str, Outcome] = {}
    for node, f in facts.items():
        if not f.pings:
            out[node] = Outcome.skip("no ping targets were planned (the inventory names no peer device IPs)")
            continue
        failed, passed, blocked = [], 0, 0
        for pg in f.pings:
            src = f.port(pg.device)
            src_ok = src is not None and src.ip is not None and \
                _endpoint_ok(exp, wrong, holders, src.ip) is not None
            dst_ok = _endpoint_ok(exp, wrong, holders, pg.target) is not None
            if not (src_ok and dst_ok):
                blocked += 1
            elif pg.ok:
                passed += 1
            else:
                failed.append(pg)
        if failed:
            p0 = failed[0]
            out[node] = Outcome(Status.FAIL,
                                f"{len(failed)} of {len(f.pings)} pings failed: " + ", ".join(
                                    f"device {p.device} -> {p.target} ({p.detail})" for p in failed[:8]),
                                f"{HCCN} -i {p0.device} -ping -g address {p0.target}; "
                                f"{HCCN} -i {p0.device} -route -g  # then check the switch path")
        elif passed == 0:
            out[node] = Outcome.skip(f"all {blocked} ping(s) blocked by a port fault reported elsewhere")
        else:
            out[node] = Outcome.ok(f"{passed} ping(s) answered" + (f", {blocked} skipped" if blocked else ""))
    return out


@cluster_check(
    "roce.path_mtu", category="roce", severity=Severity.FAIL,
    title="large packets pass the whole path",
    catches="a switch or hop with a smaller MTU than the ports (don't-fragment pings of the full "
            "MTU fail between two ports that both have it); only measurable where the device IP is "
            "a host interface",
    remediation="Raise the MTU on the switch ports / VLAN between the two nodes to the RoCE MTU",
)
def path_mtu(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    holders = _holders(facts, exp)
    wrong = _wrong_duplicates(facts, exp)
    out: dict[str, Outcome] = {}
    size = exp.path_mtu
    for node, f in facts.items():
        probes = f.path_mtu
        if not probes or size is None:
            out[node] = Outcome.skip("no large-packet probes were run")
            continue
        measurable = [p for p in probes if p.measurable]
        if not measurable:
            out[node] = Outcome.skip("not measurable here: " + probes[0].detail)
            continue
        failed, passed = [], 0
        for pr in measurable:
            src = f.port(pr.device)
            dst = _endpoint_ok(exp, wrong, holders, pr.target)
            if src is None or dst is None or not usable(src):
                continue
            if (src.mtu or 0) < size or (dst.mtu or 0) < size:
                continue  # a port MTU explains it: roce.mtu / roce.mtu.uniform report that
            if pr.ok:
                passed += 1
            else:
                failed.append(pr)
        if failed:
            p0 = failed[0]
            out[node] = Outcome(Status.FAIL,
                                f"{size}-byte don't-fragment packets lost: " + ", ".join(
                                    f"device {p.device} -> {p.target} ({p.detail})" for p in failed[:8]),
                                f"Both ports have MTU >= {size}: raise the MTU of the switch ports/VLAN "
                                f"between them (test: ping -M do -s {size - 28} {p0.target})")
        elif passed == 0:
            out[node] = Outcome.skip("every probe was explained by a port fault reported elsewhere")
        else:
            out[node] = Outcome.ok(f"{size}-byte packets pass on {passed} path(s)")
    return out
