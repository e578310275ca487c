"""PCIe evidence for the BIOS settings the NPUs need, from `lspci -D -nn -vvv`.

The BIOS settings themselves are not readable from Linux; what the OS shows is:
- SR-IOV: the `Single Root I/O Virtualization (SR-IOV)` capability with
  `IOVCtl: Enable+` or `Number of VFs: N` > 0 means virtual functions are enabled.
- ACS: `Access Control Services` with `ACSCtl: SrcValid+ ... ReqRedir+ ...`; any `+`
  in ACSCtl on an NPU or on a bridge above it redirects peer traffic to the root complex.
- Above 4G decoding: the NPU's large 64-bit prefetchable BARs (`Region N: Memory at
  <addr> (64-bit, prefetchable) [size=...]`) land below 4 GiB, or stay `<unassigned>` /
  `<ignored>`, when the firmware may not map MMIO above 4 GiB.
Only the device's own `Region` lines (one TAB deep) count; the VF BARs listed inside
the SR-IOV capability (two TABs deep) are not the device's BARs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascendctl.facts.fact import Fact

HUAWEI_VENDOR = 0x19E5
NPU_DEVICE_IDS = {0xD801: "910", 0xD802: "910B", 0xD803: "910_93", 0xD806: "950",
                  0xD100: "310", 0xD500: "310P", 0xD105: "310B"}
FOUR_GIB = 1 << 32
LARGE_BAR = 256 << 20          # a BAR this big below 4 GiB means 64-bit decoding was not used

_HEADER = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")
_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
_HUAWEI_TEXT = re.compile(r"Huawei.*?Device\s+(?P<device>[0-9a-fA-F]{4})\b", re.IGNORECASE)
_REGION = re.compile(
    r"^Region\s+(?P<n>\d+):\s+(?:\[virtual\]\s+)?Memory at\s+(?P<addr><unassigned>|<ignored>|[0-9a-fA-F]+)"
    r"\s+\((?P<bits>[^,]+),\s*(?P<pref>non-prefetchable|prefetchable)\)"
    r"(?P<rest>.*)$")
_SIZE = re.compile(r"\[size=(\d+)([KMGT]?)\]")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class PciRegion:
    index: int
    address: int | None            # None when <unassigned> / <ignored>
    is_64bit: bool
    prefetchable: bool
    size: int | None
    disabled: bool


@dataclass(frozen=True)
class PciDevice:
    address: str                   # `0000:81:00.0` (domain added when lspci omits it)
    description: str
    vendor_id: int | None
    device_id: int | None
    numa_node: int | None
    regions: tuple[PciRegion, ...]
    is_bridge: bool
    secondary_bus: int | None
    subordinate_bus: int | None
    capabilities_readable: bool    # False on `Capabilities: <access denied>` (not root)
    sriov_present: bool
    sriov_enabled: bool | None     # IOVCtl Enable+
    sriov_num_vfs: int | None
    sriov_total_vfs: int | None
    acs_present: bool
    acs_ctl: tuple[tuple[str, bool], ...]   # (flag, on) from ACSCtl

    @property
    def domain(self) -> int:
        return int(self.address.split(":")[0], 16)

    @property
    def bus(self) -> int:
        return int(self.address.split(":")[1], 16)

    @property
    def is_npu(self) -> bool:
        return self.vendor_id == HUAWEI_VENDOR and self.device_id in NPU_DEVICE_IDS

    @property
    def acs_enabled(self) -> bool:
        return any(on for _, on in self.acs_ctl)

    @property
    def sriov_on(self) -> bool:
        return bool(self.sriov_enabled) or bool(self.sriov_num_vfs)

    def low_large_bars(self) -> tuple[PciRegion, ...]:
        """Large prefetchable BARs mapped below 4 GiB or left unassigned."""
        out = []
        for r in self.regions:
            if not r.prefetchable or r.size is None or r.size < LARGE_BAR:
                continue
            if r.address is None or r.address + r.size <= FOUR_GIB:
                out.append(r)
        return tuple(out)


@dataclass(frozen=True)
class PciInventory:
    devices: tuple[PciDevice, ...]

    def npus(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.devices if d.is_npu)

    def upstream_bridges(self, device: PciDevice) -> tuple[PciDevice, ...]:
        """Bridges whose secondary..subordinate bus range holds `device`'s bus."""
        return tuple(
            b for b in self.devices
            if b.is_bridge and b.domain == device.domain and b.secondary_bus is not None
            and b.subordinate_bus is not None and b.secondary_bus <= device.bus <= b.subordinate_bus
        )


def _size(rest: str) -> int | None:
    m = _SIZE.search(rest)
    return int(m.group(1)) * _UNITS[m.group(2)] if m else None


def parse_lspci_vvv(text: str) -> PciInventory:
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _HEADER.match(line):
            blocks.append([line])
        elif blocks and (line.startswith("\t") or line.startswith(" ")):
            blocks[-1].append(line)
    return PciInventory(tuple(_device(b) for b in blocks))


def _depth(line: str) -> int:
    if line.startswith("\t"):
        return len(line) - len(line.lstrip("\t"))
    # spaces (copied output): 8 per level
    return (len(line) - len(line.lstrip(" "))) // 8 or 1


def _device(block: list[str]) -> PciDevice:
    head = _HEADER.match(block[0])
    assert head is not None
    addr = head.group("addr")
    if addr.count(":") == 1:
        addr = "0000:" + addr
    desc = head.group("desc")
    vendor = device = None
    ids = _IDS.search(desc)
    if ids:
        vendor, device = int(ids.group("vendor"), 16), int(ids.group("device"), 16)
    else:
        hw = _HUAWEI_TEXT.search(desc)
        if hw:
            vendor, device = HUAWEI_VENDOR, int(hw.group("device"), 16)
    is_bridge = "bridge" in desc.lower().split(":")[0] or "PCI bridge" in desc
    numa = None
    regions: list[PciRegion] = []
    secondary = subordinate = None
    caps_readable = True
    sriov_present = acs_present = False
    sriov_enabled = None
    num_vfs = total_vfs = None
    acs_ctl: tuple[tuple[str, bool], ...] = ()
    current_cap = ""
    for raw in block[1:]:
        depth = _depth(raw)
        line = raw.strip()
        if depth == 1:
            current_cap = ""
            if line.startswith("NUMA node:"):
                try:
                    numa = int(line.split(":", 1)[1])
                except ValueError:
                    numa = None
            elif line.startswith("Region"):
                m = _REGION.match(line)
                if m:
                    a = m.group("addr")
                    regions.append(PciRegion(
                        index=int(m.group("n")),
                        address=None if a.startswith("<") else int(a, 16),
                        is_64bit=m.group("bits").strip() == "64-bit",
                        prefetchable=m.group("pref") == "prefetchable",
                        size=_size(m.group("rest")),
                        disabled="[disabled]" in m.group("rest"),
                    ))
            elif line.startswith("Bus:"):
                sec = re.search(r"secondary=([0-9a-fA-F]+)", line)
                sub = re.search(r"subordinate=([0-9a-fA-F]+)", line)
                secondary = int(sec.group(1), 16) if sec else None
                subordinate = int(sub.group(1), 16) if sub else None
            elif line.startswith("Capabilities:"):
                if "<access denied>" in line:
                    caps_readable = False
                elif "Single Root I/O Virtualization" in line:
                    current_cap = "sriov"
                    sriov_present = True
                elif "Access Control Services" in line:
                    current_cap = "acs"
                    acs_present = True
        elif current_cap == "sriov":
            if line.startswith("IOVCtl:"):
                sriov_enabled = "Enable+" in line
            m = re.search(r"Number of VFs:\s*(\d+)", line)
            if m:
                num_vfs = int(m.group(1))
            m = re.search(r"Total VFs:\s*(\d+)", line)
            if m:
                total_vfs = int(m.group(1))
        elif current_cap == "acs" and line.startswith("ACSCtl:"):
            acs_ctl = tuple((flag, sign == "+") for flag, sign in re.findall(r"(\w+)([+-])", line[7:]))
    return PciDevice(
        address=addr.lower(), description=desc, vendor_id=vendor, device_id=device, numa_node=numa,
        regions=tuple(regions), is_bridge=is_bridge or secondary is not None, secondary_bus=secondary,
        subordinate_bus=subordinate, capabilities_readable=caps_readable,
        sriov_present=sriov_present, sriov_enabled=sriov_enabled, sriov_num_vfs=num_vfs,
        sriov_total_vfs=total_vfs, acs_present=acs_present, acs_ctl=acs_ctl,
    )


PCI = Fact("pci", section="lspci", command="lspci -D -nn -vvv", parse=parse_lspci_vvv)
