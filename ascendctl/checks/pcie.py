"""BIOS/PCIe checks from `lspci -vvv` evidence: SR-IOV off, ACS off, Above 4G decoding on.

The BIOS is not readable from Linux; what it leaves behind is (see facts/pci.py):
virtual functions enabled on the NPU, ACS control bits set on the NPU or a bridge above
it, and the NPU's large 64-bit BARs mapped below 4 GiB (or not at all).
"""

from __future__ import annotations

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import node_check
from ascendctl.facts.node import NodeFacts
from ascendctl.facts.pci import PciDevice


def _npu_devices(facts: NodeFacts) -> tuple[list[PciDevice], Outcome | None]:
    if facts.pci is None:
        why = facts.problem("lspci") or "not gathered"
        return [], Outcome(Status.WARN, f"cannot verify: lspci unavailable ({why})",
                           "Install pciutils (`apt-get install pciutils` / `yum install pciutils`)")
    npus = list(facts.pci.npus())
    if not npus:
        return [], Outcome(Status.WARN, "cannot verify: lspci shows no Huawei NPU (19e5:d80x)",
                           "Check `lspci -nn -d 19e5:`")
    if not all(d.capabilities_readable for d in npus):
        return npus, Outcome(Status.WARN, "cannot verify: lspci capabilities unreadable (not root)",
                             "Run the preflight as root (lspci -vvv needs it to read capabilities)")
    return npus, None


@node_check(
    "pcie.sriov", category="pcie", severity=Severity.WARN,
    title="SR-IOV off on the NPUs",
    catches="SR-IOV enabled: the NPU's SR-IOV capability shows `IOVCtl: Enable+` or `Number of VFs` > 0",
    remediation="Disable SR-IOV in the BIOS (or `echo 0 > /sys/bus/pci/devices/<addr>/sriov_numvfs`)",
)
def sriov(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    npus, problem = _npu_devices(facts)
    if problem:
        return problem
    on = [d for d in npus if d.sriov_on]
    if on:
        return Outcome(Status.FAIL,
                       "SR-IOV enabled on " + ", ".join(f"{d.address} ({d.sriov_num_vfs or 0} VFs)" for d in on),
                       f"Disable SR-IOV in the BIOS, or: echo 0 > /sys/bus/pci/devices/{on[0].address}/sriov_numvfs")
    return Outcome.ok(f"SR-IOV off on {len(npus)} NPU function(s)")


@node_check(
    "pcie.acs", category="pcie", severity=Severity.WARN,
    title="ACS off on the NPUs' PCIe path",
    catches="Access Control Services enabled (`ACSCtl: SrcValid+ ... ReqRedir+ ...`) on an NPU or "
            "on a bridge above it, which redirects peer-to-peer traffic through the root complex",
    remediation="Disable ACS in the BIOS (or clear it: `setpci -s <bridge> ECAP_ACS+6.w=0000`)",
)
def acs(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    npus, problem = _npu_devices(facts)
    if problem:
        return problem
    assert facts.pci is not None
    hits: dict[str, PciDevice] = {}
    for d in npus:
        for dev in (d, *facts.pci.upstream_bridges(d)):
            if dev.acs_enabled:
                hits[dev.address] = dev
    if hits:
        first = sorted(hits)[0]
        return Outcome(Status.FAIL,
                       "ACS enabled on " + ", ".join(
                           f"{a} ({' '.join(f for f, on in hits[a].acs_ctl if on)})" for a in sorted(hits)),
                       f"Disable ACS in the BIOS, or: setpci -s {first} ECAP_ACS+6.w=0000")
    return Outcome.ok(f"ACS off on {len(npus)} NPU function(s) and their bridges")


@node_check(
    "pcie.above4g", category="pcie", severity=Severity.FAIL,
    title="Above 4G decoding on",
    catches="the NPU's large 64-bit prefetchable BARs mapped below 4 GiB or unassigned, the trace "
            "of `Above 4G Decoding` (64-bit MMIO) being off in the BIOS",
    remediation="Enable `Above 4G Decoding` (64-bit MMIO / MMIO High) in the BIOS and reboot",
)
def above4g(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    npus, problem = _npu_devices(facts)
    if problem and not npus:
        return problem
    low = [(d, r) for d in npus for r in d.low_large_bars()]
    if low:
        return Outcome(Status.FAIL,
                       "large BARs below 4 GiB or unassigned: " + ", ".join(
                           f"{d.address} region {r.index} at "
                           f"{'unassigned' if r.address is None else hex(r.address)} size {(r.size or 0) >> 20}M"
                           for d, r in low[:6]),
                       "Enable `Above 4G Decoding` (and 64-bit MMIO) in the BIOS, then reboot")
    if not any(r.size and r.prefetchable for d in npus for r in d.regions):
        return Outcome(Status.WARN, "cannot verify: lspci shows no prefetchable BAR sizes for the NPUs",
                       "Run the preflight as root")
    return Outcome.ok(f"NPU BARs mapped above 4 GiB on {len(npus)} function(s)")
