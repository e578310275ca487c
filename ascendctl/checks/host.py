"""Host checks: NUMA affinity of the NPUs, disk for the model, ports, clock, hostname."""

from __future__ import annotations

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import declare, node_check
from ascendctl.facts.node import NodeFacts

GIB = 1 << 30

declare(
    "host.reachable", category="host", severity=Severity.FAIL, scope="node",
    title="node reachable over SSH",
    catches="sshd down, node powered off, wrong address/key (reported by the executor, which then "
            "runs no other check on that node)",
    remediation="Check the node's power and sshd (`systemctl status sshd`), the inventory address, "
                "port, user and key",
)


def _cpus_text(cpus: frozenset[int]) -> str:
    if not cpus:
        return "none"
    ordered = sorted(cpus)
    ranges, start, prev = [], ordered[0], ordered[0]
    for c in ordered[1:]:
        if c != prev + 1:
            ranges.append(f"{start}-{prev}" if start != prev else str(start))
            start = c
        prev = c
    ranges.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(ranges)


@node_check(
    "host.numa", category="host", severity=Severity.WARN,
    title="NPU CPU affinity usable for NUMA binding",
    catches="an NPU whose CPU affinity (npu-smi topo `CPU Affinity`, or lspci `NUMA node`) is "
            "unknown, spans NUMA nodes, names CPUs that are not online, or no NUMA node at all "
            "(NUMA disabled in the BIOS) -- the launcher cannot bind each rank next to its NPU",
    remediation="Enable NUMA in the BIOS; check `npu-smi info -t topo` and `lscpu`",
)
def numa(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if facts.numa is None:
        return Outcome.skip("NUMA topology not gathered")
    if facts.npu_smi is None or not facts.npu_smi.ok:
        return Outcome.skip("no NPU table (see npu.smi)")
    topo = facts.topology
    pci_numa = {}
    if facts.pci is not None:
        pci_numa = {d.address: d.numa_node for d in facts.pci.npus()}
    issues, bindings = [], []
    for c in facts.npu_smi.chips:
        dev = c.phy_id if c.phy_id is not None else c.npu_id
        cpus = topo.affinity_of(dev) if topo is not None and topo.has_cpu_affinity else None
        label = f"NPU {c.npu_id}" + (f"/{c.chip_id}" if c.phy_id is not None else "")
        if cpus:
            offline = cpus - facts.numa.online_cpus
            nodes = {facts.numa.node_of_cpu(x) for x in cpus if x in facts.numa.online_cpus}
            if offline:
                issues.append(f"{label}: affinity CPUs {_cpus_text(frozenset(offline))} are not online")
            elif len(nodes) > 1:
                issues.append(f"{label}: affinity {_cpus_text(cpus)} spans NUMA nodes {sorted(nodes)}")
            else:
                bindings.append(f"{label} -> CPUs {_cpus_text(cpus)} (node {nodes.pop()})")
            continue
        pn = pci_numa.get(c.bus_id.lower())
        if pn is not None and pn >= 0:
            if not facts.numa.cpus_of(pn):
                issues.append(f"{label}: PCIe NUMA node {pn} has no CPUs on this host")
            else:
                bindings.append(f"{label} -> NUMA node {pn}")
        elif pn is not None and pn < 0 and len(facts.numa.nodes) <= 1:
            issues.append(f"{label}: no NUMA node (NUMA disabled in the BIOS?)")
        elif len(facts.numa.nodes) <= 1:
            bindings.append(f"{label} -> the only NUMA node")
        else:
            issues.append(f"{label}: CPU affinity unknown")
    if issues:
        return Outcome(Status.FAIL, "; ".join(issues[:6]),
                       "Enable NUMA in the BIOS and compare `npu-smi info -t topo` with `lscpu`",
                       tuple(bindings))
    return Outcome.ok(f"{len(bindings)} NPU(s) with a single-node CPU affinity", *bindings)


@node_check(
    "host.disk", category="host", severity=Severity.FAIL,
    title="free disk for the model",
    catches="less free space at the model path than the model needs (plus a margin)",
    remediation="Free space on that filesystem or point the model path at a bigger one",
)
def disk(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not exp.model_bytes or not exp.model_path:
        return Outcome.skip("the inventory gives no model size/path")
    if facts.disk is None:
        return Outcome(Status.FAIL, f"could not measure free space at {exp.model_path} ("
                       + (facts.problem("df") or "not gathered") + ")",
                       f"df -h {exp.model_path}")
    need = int(exp.model_bytes * exp.disk_margin)
    free = facts.disk.available_bytes
    if free < need:
        return Outcome(Status.FAIL,
                       f"{free / GIB:.1f} GiB free on {facts.disk.mount_point} ({facts.disk.path}), "
                       f"the model needs {need / GIB:.1f} GiB",
                       f"df -h {facts.disk.path}; free {(need - free) / GIB:.1f} GiB there or set another "
                       f"model path")
    return Outcome.ok(f"{free / GIB:.1f} GiB free on {facts.disk.mount_point}, need {need / GIB:.1f} GiB")


@node_check(
    "host.model_storage", category="host", severity=Severity.WARN,
    title="model on local storage",
    catches="the model path on network storage (NFS, CIFS, Ceph, Lustre, FUSE): slow cold start when "
            "every rank reads at once",
    remediation="Copy the weights to local NVMe on every node (ascendctl distributes them)",
)
def model_storage(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if facts.disk is None:
        return Outcome.skip("free space not measured (no model path)")
    if facts.disk.is_network:
        return Outcome(Status.FAIL,
                       f"{facts.disk.path} is on {facts.disk.fs_type or 'network'} storage "
                       f"({facts.disk.filesystem})",
                       "Put the model on a local filesystem on each node")
    return Outcome.ok(f"{facts.disk.path} on local {facts.disk.fs_type or 'filesystem'}")


@node_check(
    "host.ports", category="host", severity=Severity.FAIL,
    title="launch ports free",
    catches="a port the launch mode binds (API port, DP RPC port, master port, Ray ports) already "
            "listening on the node",
    remediation="Stop the process holding the port (`ss -ltnp 'sport = :PORT'`) or change the port",
)
def ports(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    wanted = exp.node(node).ports_free
    if not wanted:
        return Outcome.skip("the launch mode binds no ports on this node")
    busy = []
    for s in facts.listening:
        if s.port in wanted and not (s.process and s.process in exp.allowed_port_owners):
            busy.append(s)
    if busy:
        p0 = busy[0]
        return Outcome(Status.FAIL,
                       "ports in use: " + ", ".join(f"{s.port} ({s.process or 'unknown process'} on "
                                                    f"{s.address})" for s in busy),
                       f"ss -ltnp 'sport = :{p0.port}'  # stop that process or change the port")
    return Outcome.ok("ports free: " + " ".join(map(str, wanted)))


@node_check(
    "host.clock", category="host", severity=Severity.FAIL,
    title="clock in sync",
    catches="a node clock off from the controller's (and so from the other nodes) by more than the "
            "tolerance; measured NTP-style over the gather round trip",
    remediation="Enable time sync: `timedatectl set-ntp true` / `chronyc makestep`",
)
def clock(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    c = facts.clock
    if c is None or c.offset_s is None:
        return Outcome.skip("clock not sampled (no controller timestamps)")
    tol = exp.clock_skew_tolerance_s
    offset, err = c.offset_s, c.uncertainty_s or 0.0
    if abs(offset) - err > tol:
        return Outcome(Status.FAIL, f"clock off by {offset:+.3f} s (±{err:.3f}), tolerance {tol} s",
                       "chronyc makestep  # or: timedatectl set-ntp true; systemctl restart chronyd")
    if err > tol:
        return Outcome(Status.WARN, f"round trip too slow to measure the clock (±{err:.3f} s)",
                       "Rerun the preflight; check the network to the node")
    return Outcome.ok(f"clock offset {offset:+.3f} s (±{err:.3f})")


@node_check(
    "host.hostname", category="host", severity=Severity.WARN,
    title="hostname resolves",
    catches="a hostname that does not resolve (Gloo/torch fall back to it when no socket NIC is set)",
    remediation="Add `<node ip> <hostname>` to /etc/hosts",
)
def hostname(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    h = facts.hostname
    if h is None or not h.hostname:
        return Outcome.skip("hostname not gathered")
    if not h.resolves:
        ip = exp.node(node).socket_ip or "<node ip>"
        return Outcome(Status.FAIL, f"hostname {h.hostname} does not resolve",
                       f"echo '{ip} {h.hostname}' >> /etc/hosts")
    return Outcome.ok(f"{h.hostname} resolves to {', '.join(h.resolved)}")
