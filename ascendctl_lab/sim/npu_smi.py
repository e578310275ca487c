"""`npu-smi`: the Ascend driver's management tool, as printed by npu-smi 23.x-25.x on
Atlas A2 (910B) servers: the 98-column main table and the `\\t%-30s : %s` key/value
outputs. Layout rules come from real captures (see docs/lab.md for the list)."""

from __future__ import annotations

import os
import sys

from . import state as st

BORDER = "+" + "-" * 96 + "+"
SPLIT = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
DOUBLE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]"
INIT_FAILED = "dcmi module initialize failed. ret is -8005"
DRIVER_WARNING = ("[WARNING]The driver package may not be completely installed, which may "
                  "cause function abnormal. Please reinstall it.")
INSTALL_INFO = "/etc/ascend_install.info"

HELP = """Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]

Commands:
       watch          Show all device's status in scrolling format
       proc           Show device's matrix process status in scrolling format
       -h, --help     Show this help text and exit
       -m             Show all device's mapping information
       -l             Show all device's topology information
       -t type        Show information for type
                      type: board, flash, memory, usages, sensors, temp, power, volt, mac-addr,
                            common, health, product, ecc, ip, sys-time, i2c_check, work-mode,
                            ecc-enable, p2p-enable, ssh-enable, license, customized-info,
                            device-share, nve-level, aicpu-config, pcie-err, mcu-monitor,
                            err-count, boot-area, vnpu-mode, info-vnpu, vnpu-svm, cpu-num-cfg,
                            first-power-on-date, proc-mem, phyid-remap, vnpu-cfg-recover, key-manage,
                            template-info, pkcs-enable, p2p-mem-cfg, pwm-mode, pwm-duty-ratio,
                            boot-select, topo.

Options:
       -i %d          Card ID
       -c %d          Chip ID
       -p %d          Chip Physical ID
"""


def kv(key: str, value: object) -> str:
    return f"\t{key:<30} : {value}"


def process_name(pid: int, proc_root: str = "/proc") -> str | None:
    """argv[0] of a live process, cut to 15 characters as npu-smi does; None if gone."""
    try:
        with open(f"{proc_root}/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    argv0 = raw.split(b"\0")[0].decode(errors="replace")
    if not argv0:
        try:
            with open(f"{proc_root}/{pid}/comm") as handle:
                argv0 = handle.read().strip()
        except OSError:
            return None
    return argv0[:15]


def live_processes(state: dict, alive=process_name) -> list[dict]:
    """Processes holding NPUs that still run (a dead process frees its HBM)."""
    out = []
    for proc in state.get("processes", []):
        name = proc.get("name") if proc.get("static") else alive(int(proc["pid"]))
        if name is None:
            continue
        out.append({**proc, "name": name if not proc.get("name") else proc["name"]})
    return out


def hbm_used(npu: dict, procs: list[dict]) -> int:
    used = npu["hbm_used"] + sum(int(p["mem_mb"]) for p in procs if p["npu"] == npu["id"])
    return min(used, npu["hbm_total"])


def render_info(state: dict, procs: list[dict], install_complete: bool = True,
                temps: dict[int, int] | None = None) -> str:
    """TEMPS: chip temperatures that override the state's (a `temp-spike`)."""
    npus = st.visible(state)
    temps = temps or {}
    version = state["npu_smi_version"]
    out = [
        BORDER,
        f"| npu-smi {version:<24} Version: {version:<52} |",
        SPLIT,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           "
        "Hugepages-Usage(page)|",
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  "
        "HBM-Usage(MB)        |",
        DOUBLE,
    ]
    for npu in npus:
        out.append(f"| {npu['id']:<5} {state['chip']:<20}| {npu['health']:<13} | "
                   f"{npu['power']:<11.1f} {temps.get(npu['id'], npu['temp']):<17} "
                   f"{npu['hugepages_used']:<5}/ {npu['hugepages_total']:<13} |")
        out.append(f"| {0:<26}| {npu['bus_id']:<13} | {npu['aicore_usage']:<11} "
                   f"{0:<5}/ {0:<10} {hbm_used(npu, procs):<5}/ {npu['hbm_total']:<13} |")
        out.append(DOUBLE)
    out.append(SPLIT)
    out.append("| NPU     Chip              | Process id    | Process name             "
               "| Process memory(MB)      |")
    out.append(DOUBLE)
    for npu in npus:
        rows = [p for p in procs if p["npu"] == npu["id"]]
        if not rows:
            out.append(f"| No running processes found in NPU {npu['id']:<7}".ljust(97) + "|")
        for proc in rows:
            out.append(f"| {npu['id']:<7} {0:<18}| {proc['pid']:<13} | {proc['name']:<24} "
                       f"| {proc['mem_mb']:<23} |")
        out.append(DOUBLE)
    if not install_complete:
        out.append(DRIVER_WARNING)
    return "\n".join(out) + "\n"


def _usage_rate(npu: dict, procs: list[dict]) -> int:
    return hbm_used(npu, procs) * 100 // npu["hbm_total"]


def render_board(state: dict, npu: dict) -> str:
    board = state["board"]
    lines = [kv("NPU ID", npu["id"]),
             kv("Product Name", board["product_name"]),
             kv("Model", board["model"]),
             kv("Manufacturer", board["manufacturer"]),
             kv("Serial Number", npu["serial"]),
             kv("Software Version", state["driver"].get("Version", "NA")),
             kv("Firmware Version", state["firmware"].get("Version", "NA")),
             kv("Compatibility", "OK"),
             kv("Board ID", f"0x{board['board_id']:02x}" if board["board_id"] else "NA"),
             kv("PCB ID", board["pcb_id"]),
             kv("BOM ID", board["bom_id"] if board["bom_id"] else "NA"),
             kv("PCIe Bus Info", npu["bus_id"]),
             kv("Slot ID", npu["id"]),
             kv("Class ID", "NA"),
             kv("PCI Vendor ID", "0x19E5"),
             kv("PCI Device ID", "0xD802"),
             kv("Subsystem Vendor ID", f"0x{board['subsystem_vendor']:04X}"),
             kv("Subsystem Device ID", f"0x{board['subsystem_device']:04X}"),
             kv("Chip Count", 1)]
    return "\n".join(lines) + "\n"


def render_chip_board(state: dict, npu: dict) -> str:
    board = state["board"]
    lines = [kv("NPU ID", npu["id"]),
             kv("Chip ID", 0),
             kv("Chip Type", "Ascend"),
             kv("Chip Name", state["chip"]),
             kv("Chip Version", "V1"),
             kv("Board ID", f"0x{board['board_id']:02x}"),
             kv("PCB ID", "NA"),
             kv("BOM ID", board["bom_id"]),
             kv("VDie ID", npu["vdie_id"]),
             kv("NDie ID", npu["ndie_id"]),
             kv("Chip Position ID", npu["id"]),
             kv("PCIe Bus Info", npu["bus_id"]),
             kv("Firmware Version", state["firmware"].get("Version", "NA"))]
    return "\n".join(lines) + "\n"


def render_health(npu: dict) -> str:
    lines = [kv("Health Status", npu["health"])]
    codes = npu.get("error_codes") or []
    if not codes:
        lines += [kv("Error Code", "NA"), kv("Error Information", "NA")]
    else:
        lines.append(kv("Error Code", " ".join(codes)))
        # an info of None: the driver has no text for the code, npu-smi prints it in
        # decimal (print_diagnosis_info's DCMI_ERR_CODE_NOT_SUPPORT path)
        given = list(npu.get("error_info") or [])
        given += [None] * (len(codes) - len(given))
        infos = [str(int(code, 16)) if info is None else info for code, info in zip(codes, given)]
        lines.append(kv("Error Information", infos[0]))
        for info in infos[1:]:
            lines += ["", kv("", info)]
    return "\n".join(lines) + "\n"


def _card_header(npu: dict) -> list[str]:
    return [kv("NPU ID", npu["id"]), kv("Chip Count", 1), ""]


def render_usages(state: dict, npu: dict, procs: list[dict]) -> str:
    lines = _card_header(npu) + [
        kv("DDR Capacity(MB)", 0),
        kv("DDR Usage Rate(%)", 0),
        kv("DDR Hugepages Total(page)", 0),
        kv("DDR Hugepages Usage Rate(%)", 0),
        kv("HBM Capacity(MB)", npu["hbm_total"]),
        kv("HBM Usage Rate(%)", _usage_rate(npu, procs)),
        kv("Aicore Usage Rate(%)", npu["aicore_usage"]),
        kv("Aivector Usage Rate(%)", 0),
        kv("Aicpu Usage Rate(%)", 0),
        kv("Ctrlcpu Usage Rate(%)", 0),
        kv("DDR Bandwidth Usage Rate(%)", 0),
        kv("HBM Bandwidth Usage Rate(%)", 0),
    ]
    if st.major_version(state["npu_smi_version"]) >= 25:
        lines += [kv("NPU Utilization(%)", npu["aicore_usage"]), kv("Aicube Usage Rate(%)", 0)]
    lines.append(kv("Chip ID", 0))
    return "\n".join(lines) + "\n"


def render_common(state: dict, npu: dict, procs: list[dict], temp: int | None = None) -> str:
    lines = _card_header(npu) + [
        kv("Chip ID", 0),
        kv("Memory Usage Rate(%)", 0),
        kv("HBM Usage Rate(%)", _usage_rate(npu, procs)),
        kv("Aicore Usage Rate(%)", npu["aicore_usage"]),
        kv("Aicore Freq(MHZ)", 1800),
        kv("Aicore curFreq(MHZ)", 800 if not npu["aicore_usage"] else 1800),
        kv("Aicore Count", state["aicore_count"]),
        kv("Temperature(C)", npu["temp"] if temp is None else temp),
        kv("NPU Real-time Power(W)", f"{npu['power']:.1f}"),
        "",
        kv("Chip Name", "mcu"),
        kv("Temperature(C)", npu["mcu_temp"]),
    ]
    return "\n".join(lines) + "\n"


def render_temp(temp: int) -> str:
    """`-t temp -i N -c 0` on a server (npu_info_print.c print_chip_temp_info)."""
    return kv("NPU Temperature (C)", temp) + "\n"


def ecc_kv(key: str, value: object) -> str:
    return f"\t{key:<40} : {value}"


ECC_KEYS = ("HBM Single Bit Error Count", "HBM Double Bit Error Count",
            "HBM Single Bit Aggregate Total Err Cnt", "HBM Double Bit Aggregate Total Err Cnt",
            "HBM Single Bit Isolated Pages Count", "HBM Double Bit Isolated Pages Count",
            "HBM Single Bit Next-Isolated Pages Count",
            "HBM Double Bit Next-Isolated Pages Count")


def render_ecc(npu: dict) -> str:
    """`-t ecc -i N [-c 0]` on a 910B: `\\t%-40s : %u` lines (printf_hbm_ecc_info and
    show_hbm_ecc_info; tests/fixtures/npu-smi_info_t_ecc.txt)."""
    counts = npu.get("hbm_ecc") or {}
    lines = [ecc_kv("NPU ID", npu["id"])]
    lines += [ecc_kv(key, int(counts.get(field, 0))) for key, field in zip(ECC_KEYS, st.ECC_FIELDS)]
    return "\n".join(lines) + "\n"


def render_memory(npu: dict) -> str:
    lines = _card_header(npu) + [
        kv("DDR Capacity(MB)", 0),
        kv("DDR Clock Speed(MHz)", 0),
        kv("HBM Capacity(MB)", npu["hbm_total"]),
        kv("HBM Clock Speed(MHz)", 1600),
        kv("HBM Temperature(C)", npu["hbm_temp"]),
        kv("HBM Manufacturer ID", "0x2"),
        kv("Chip ID", 0),
    ]
    return "\n".join(lines) + "\n"


def render_topo(state: dict) -> str:
    npus = st.visible(state)
    header = "".join(f"NPU{n['id']:<8}" for n in npus) + "CPU Affinity"
    lines = [header]
    for row in npus:
        cells = "".join(f"{'X' if col['id'] == row['id'] else 'HCCS':<11}" for col in npus)
        lines.append(f"NPU{row['id']:<8}{cells}{row['cpu_affinity']}")
    lines += ["", "Legend:",
              "  X    = Self",
              "  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, "
              "such as QPI, UPI.",
              "  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.",
              "  PIX  = Path traversing a single PCIe switch",
              "  PXB  = Path traversing multipul PCIe switches",
              "  HCCS = Connection traversing HCCS."]
    return "\n".join(lines) + "\n"


def render_list(state: dict) -> str:
    npus = st.visible(state)
    lines = [kv("Total Count", len(npus)), ""]
    for npu in npus:
        lines += [kv("NPU ID", npu["id"]), kv("Chip Count", 1), ""]
    return "\n".join(lines) + "\n"


def render_mapping(state: dict) -> str:
    npus = st.visible(state)
    lines = [f"\t{'NPU ID':<30} {'Chip ID':<30} {'Chip Logic ID':<30} {'Chip Name':<30}"]
    for npu in npus:
        lines.append(f"\t{npu['id']:<30} {0:<30} {npu['id']:<30} Ascend {state['chip']}")
        lines.append(f"\t{npu['id']:<30} {1:<30} {'-':<30} {'Mcu':<30}")
    return "\n".join(lines) + "\n"


class UsageError(Exception):
    pass


def _invalid_card() -> UsageError:
    return UsageError(f"Invalid card id.\nError parameter of -i\n{USAGE}\n")


def _parse_opts(args: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-t", "-i", "-c", "-p") and i + 1 < len(args):
            opts[arg] = args[i + 1]
            i += 2
        elif arg in ("-m", "-l", "-h", "--help"):
            opts[arg] = ""
            i += 1
        else:
            raise UsageError(f"Invalid parameter {arg}\n{USAGE}\n")
    return opts


def run(argv: list[str], state: dict, *, alive=process_name,
        install_complete: bool = True, spikes: st.TempSpikes | None = None) -> tuple[int, str]:
    """Execute `npu-smi ARGV` against STATE; return (exit code, output). SPIKES: the
    node's pending temperature spikes (none if not given)."""
    if argv[:1] == ["-v"]:
        return 0, f"npu-smi version: {state['npu_smi_version']}\n"
    if not argv or argv[0] != "info":
        return 1, f"{USAGE}\n"
    if not state.get("driver_loaded", True):
        return 1, INIT_FAILED + "\n"
    try:
        opts = _parse_opts(argv[1:])
    except UsageError as err:
        return 1, str(err)
    if "-h" in opts or "--help" in opts:
        return 0, HELP
    procs = live_processes(state, alive)
    if "-m" in opts:
        return 0, render_mapping(state)
    if "-l" in opts:
        return 0, render_list(state)
    kind = opts.get("-t")
    if kind is None:
        temps = {}
        for npu in st.visible(state) if spikes else ():
            spiked = spikes.peek(npu["id"])  # type: ignore[union-attr]
            if spiked is not None:
                temps[npu["id"]] = spiked
        return 0, render_info(state, procs, install_complete, temps)
    if kind == "topo":
        return 0, render_topo(state)
    if "-i" not in opts:
        return 1, f"Error parameter of -i\n{USAGE}\n"
    try:
        card = int(opts["-i"])
        npu = next(n for n in st.visible(state) if n["id"] == card)
    except (ValueError, StopIteration):
        return 1, str(_invalid_card())
    if "-c" in opts and opts["-c"] != "0":
        return 1, "Invalid chip id.\nError parameter of -c\n" + USAGE + "\n"
    if kind == "board":
        return 0, render_chip_board(state, npu) if "-c" in opts else render_board(state, npu)
    if kind == "health":
        return 0, render_health(npu)
    if kind == "usages":
        return 0, render_usages(state, npu, procs)
    if kind == "common":
        return 0, render_common(state, npu, procs, spikes.peek(card) if spikes else None)
    if kind == "temp":
        spiked = spikes.take(card) if spikes else None
        return 0, render_temp(npu["temp"] if spiked is None else spiked)
    if kind == "ecc":
        return 0, render_ecc(npu)
    if kind == "memory":
        return 0, render_memory(npu)
    return 1, f"This device does not support querying {kind}.\n"


def _install_complete() -> bool:
    try:
        with open(INSTALL_INFO) as handle:
            return "Driver_Install_Status=complete" in handle.read()
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not os.path.exists("/dev/davinci_manager"):
        sys.stdout.write("DrvMngGetConsoleLogLevel failed. (ret=4)\n" + INIT_FAILED + "\n")
        return 1
    spikes = st.TempSpikes() if os.path.isdir(st.SPIKE_DIR) else None
    code, text = run(args, st.load(), install_complete=_install_complete(), spikes=spikes)
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
