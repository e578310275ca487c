"""`lspci` for a simulated Atlas A2 node: the Huawei 910B NPUs (19e5:d802) and the PCIe
root ports above them, printed like pciutils does. BIOS settings show the way the real
OS shows them: SR-IOV through the NPUs' SR-IOV capability (IOVCtl Enable+ and VFs),
ACS through the root ports' ACSCtl flags, Above-4G decoding through where the NPUs'
64-bit BARs were placed (above 4 GiB, or <unassigned> and disabled when it is off)."""

from __future__ import annotations

import sys

from . import state as st

VENDOR = "Huawei Technologies Co., Ltd."
ROOT_PORT = ("a120", "HiSilicon PCIe Root Port with Gen4", "21")
NPU_DEVICE = ("d802", "20")
NPU_BARS = ((0, 8 << 20), (2, 1 << 30), (4, 128 << 20))


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def devices(state: dict) -> list[dict]:
    out = []
    for npu in st.visible(state):
        domain, bus, devfn = npu["bus_id"].lower().split(":", 2)
        bus_n = int(bus, 16)
        root_bus = bus_n & 0xC0
        slot = (bus_n - root_bus - 1) % 32
        out.append({"bdf": f"{root_bus:02x}:{slot:02x}.0", "domain": domain, "kind": "port",
                    "primary": f"{root_bus:02x}", "secondary": bus, "npu": npu})
        out.append({"bdf": f"{bus}:{devfn}", "domain": domain, "kind": "npu", "npu": npu})
    return out


def _title(dev: dict, numeric: int) -> str:
    if dev["kind"] == "port":
        dev_id, name, rev = ROOT_PORT
        cls, cls_name = "0604", "PCI bridge"
    else:
        dev_id, rev = NPU_DEVICE
        name, cls, cls_name = f"Device {dev_id}", "1200", "Processing accelerators"
    if numeric == 1:
        return f"{cls}: 19e5:{dev_id} (rev {rev})"
    if numeric == 2:
        name = "Device" if dev["kind"] == "npu" else name
        return f"{cls_name} [{cls}]: {VENDOR} {name} [19e5:{dev_id}] (rev {rev})"
    return f"{cls_name}: {VENDOR} {name} (rev {rev})"


def _flags(pairs: list[tuple[str, bool]]) -> str:
    return " ".join(f"{name}{'+' if on else '-'}" for name, on in pairs)


def _npu_details(state: dict, dev: dict, verbosity: int) -> list[str]:
    bios = state["bios"]
    npu = dev["npu"]
    lines = [f"\tSubsystem: {VENDOR} Device {state['board']['subsystem_device']:04x}"]
    mem = bool(bios.get("above4g", True))
    if verbosity >= 2:
        lines.append("\tControl: I/O- Mem" + ("+" if mem else "-") + " BusMaster+ SpecCycle- "
                     "MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B- DisINTx+")
        lines.append("\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- "
                     "<TAbort- <MAbort- >SERR- <PERR- INTx-")
        lines.append("\tLatency: 0, Cache Line Size: 32 bytes")
    else:
        lines.append("\tFlags: bus master, fast devsel, latency 0, NUMA node 0")
    if verbosity >= 2:
        lines.append("\tNUMA node: 0")
    base = 0x20000000000 + npu["id"] * 0x100000000
    for index, size in NPU_BARS:
        if mem:
            lines.append(f"\tRegion {index}: Memory at {base:x} (64-bit, prefetchable) "
                         f"[size={_size(size)}]")
            base += size
        else:
            lines.append(f"\tRegion {index}: Memory at <unassigned> (64-bit, prefetchable) "
                         f"[disabled] [size={_size(size)}]")
    lines.append("\tCapabilities: [40] Express (v2) Endpoint, MSI 00")
    if verbosity >= 2:
        lines.append("\t\tLnkSta:\tSpeed 16GT/s, Width x16")
    lines.append("\tCapabilities: [80] MSI-X: Enable+ Count=256 Masked-")
    lines.append("\tCapabilities: [100 v2] Advanced Error Reporting")
    lines.append("\tCapabilities: [150 v1] Alternative Routing-ID Interpretation (ARI)")
    lines.append("\tCapabilities: [200 v1] Single Root I/O Virtualization (SR-IOV)")
    if verbosity >= 2:
        sriov = bool(bios.get("sriov", False))
        vfs = 16 if sriov else 0
        lines += [
            "\t\tIOVCap:\tMigration-, Interrupt Message Number: 000",
            "\t\tIOVCtl:\t" + _flags([("Enable", sriov), ("Migration", False),
                                      ("Interrupt", False), ("MSE", sriov),
                                      ("ARIHierarchy", True)]),
            "\t\tIOVSta:\tMigration-",
            f"\t\tInitial VFs: 16, Total VFs: 16, Number of VFs: {vfs}, "
            "Function Dependency Link: 00",
            "\t\tVF offset: 1, stride: 1, Device ID: d802",
            "\t\tSupported Page Size: 00000553, System Page Size: 00000001",
        ]
    lines.append("\tKernel driver in use: devdrv_device_driver")
    lines.append("\tKernel modules: drv_pcie_host")
    return lines


def _port_details(state: dict, dev: dict, verbosity: int) -> list[str]:
    acs = bool(state["bios"].get("acs", False))
    sec = dev["secondary"]
    lines = [f"\tBus: primary={dev['primary']}, secondary={sec}, subordinate={sec}, "
             "sec-latency=0"]
    if verbosity >= 2:
        lines.insert(0, "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- "
                        "ParErr- Stepping- SERR+ FastB2B- DisINTx+")
    lines.append("\tCapabilities: [40] Express (v2) Root Port (Slot+), MSI 00")
    lines.append("\tCapabilities: [100 v1] Advanced Error Reporting")
    lines.append("\tCapabilities: [148 v1] Access Control Services")
    if verbosity >= 2:
        cap = [("SrcValid", True), ("TransBlk", True), ("ReqRedir", True),
               ("CmpltRedir", True), ("UpstreamFwd", True), ("EgressCtrl", False),
               ("DirectTrans", False)]
        ctl = [(name, acs and supported and name not in ("TransBlk",))
               for name, supported in cap]
        lines.append("\t\tACSCap:\t" + _flags(cap))
        lines.append("\t\tACSCtl:\t" + _flags(ctl))
    lines.append("\tKernel driver in use: pcieport")
    return lines


def render(state: dict, args: list[str]) -> tuple[int, str]:
    verbosity, numeric, domain = 0, 0, False
    vendor_filter = slot_filter = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-d", "-s") and i + 1 < len(args):
            if arg == "-d":
                vendor_filter = args[i + 1].lower()
            else:
                slot_filter = args[i + 1].lower()
            i += 2
            continue
        if arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= set("vnDkq"):
            verbosity += arg.count("v")
            numeric += arg.count("n")
            domain = domain or "D" in arg
            i += 1
            continue
        return 1, f"lspci: Unknown option '{arg.lstrip('-')[:1]}' (see \"lspci --help\")\n"
    chosen = []
    for dev in devices(state):
        dev_id = ROOT_PORT[0] if dev["kind"] == "port" else NPU_DEVICE[0]
        if vendor_filter:
            want_vendor, _, want_dev = vendor_filter.partition(":")
            if (want_vendor and want_vendor != "19e5") or (want_dev and want_dev != dev_id):
                continue
        if slot_filter and not (dev["bdf"] == slot_filter or
                                f"{dev['domain']}:{dev['bdf']}" == slot_filter):
            continue
        chosen.append(dev)
    chosen.sort(key=lambda d: d["bdf"])
    blocks = []
    for dev in chosen:
        name = f"{dev['domain']}:{dev['bdf']}" if domain else dev["bdf"]
        head = f"{name} {_title(dev, min(numeric, 2))}"
        if not verbosity:
            blocks.append(head)
            continue
        body = (_npu_details(state, dev, verbosity) if dev["kind"] == "npu"
                else _port_details(state, dev, verbosity))
        blocks.append("\n".join([head] + body) + "\n")
    if not blocks:
        return 0, ""
    return 0, ("\n".join(blocks) + "\n") if verbosity else ("\n".join(blocks) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    code, text = render(st.load(), args)
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
