"""One JSON file per node holds everything the simulated hardware reports."""

from __future__ import annotations

import marshal
import os

# The simulated tools run once per call (a gather makes ~100 calls per node), so their
# start-up is kept small: json (which pulls in re) only when the state changed since the
# last call, otherwise the state comes from a marshal copy; hashlib, tempfile and copy are
# imported where used.

STATE_PATH = os.environ.get("ASCEND_SIM_STATE", "/etc/ascend-sim/state.json")
SCHEMA = 1

# A coherent set by the documented rules (FACTS.md / FORMATS.md §4): the firmware
# version lies inside the driver's compatible_version_fw range and its
# compatible_version_drv covers the driver; the toolkit's compatible_version lists the
# driver's Innerversion C-code (C23). The driver file is a real 25.3.rc1 capture; the
# firmware build and the CANN 8.5.1 inner version are the lab's own choice.
DEFAULT_DRIVER: dict[str, str] = {
    "Version": "25.3.rc1",
    "ascendhal_version": "7.35.23",
    "aicpu_version": "1.0",
    "tdt_version": "1.0",
    "log_version": "1.0",
    "prof_version": "2.0",
    "dvppkernels_version": "1.1",
    "tsfw_version": "1.0",
    "Innerversion": "V100R001C23SPC002B212",
    "compatible_version": "[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],[V100R001C23]",
    "compatible_version_fw": "[7.0.0,8.9.9]",
    "package_version": "25.3.rc1",
}
DEFAULT_FIRMWARE: dict[str, str] = {
    "Version": "7.8.0.2.212",
    "firmware_version": "1.0",
    "package_version": "25.3.rc1",
    "compatible_version_drv": "[24.1,24.1.],[25.0,25.0.],[25.2,25.2.],[25.3,25.3.]",
}
DEFAULT_TOOLKIT: dict[str, str] = {
    "package_name": "Ascend-cann-toolkit",
    "version": "8.5.1",
    "innerversion": "V100R001C25SPC001B210",
    "compatible_version": ("[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],"
                           "[V100R001C23],[V100R001C25]"),
    "arch": "x86_64",
    "os": "linux",
    "path": "/usr/local/Ascend/ascend-toolkit/8.5.1/x86_64-linux",
}
DEFAULT_TOOLKIT_RUNNING = "8.5.1.1.220:8.5.1"

# Per chip model: HBM (MB), AI core count (910B2/B1 have 24 cores, B3/B4 20).
CHIPS: dict[str, dict] = {
    "910B1": {"hbm_mb": 65536, "aicore_count": 24},
    "910B2": {"hbm_mb": 65536, "aicore_count": 24},
    "910B3": {"hbm_mb": 65536, "aicore_count": 20},
    "910B4": {"hbm_mb": 32768, "aicore_count": 20},
}

# Bus ids of an Atlas 800 A2 (the 910B3 capture's order), extended past 8 if asked.
A2_BUS_IDS = ("0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
              "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0")

# A real Alarm set from the faultdiag capture (npu-smi_info_t_health.txt).
ALARM_ERROR_CODES = ["A4025021", "8C03A000", "8C084E00"]
ALARM_ERROR_INFO = [
    "ascend_monitor adda heart beat lost error",
    "node type=process-manager, sensor type=General Software, event state=The process "
    "start failed or exit abnormally",
    "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
]
# `chip-alarm`: 80E01801 (HBM multi-bit error on access), a RestartBusiness code of
# MindCluster's faultCode.json (policy_defaults.json: restart; 2 within a day: isolate).
# No capture pairs it with its driver text: npu-smi prints the code in decimal then
# (print_diagnosis_info, the DCMI_ERR_CODE_NOT_SUPPORT path), an info entry of None here.
CHIP_ALARM_ERROR_CODES = ["80E01801"]
CHIP_ALARM_ERROR_INFO: list[str | None] = [None]
WARNING_ERROR_CODES = ["80E18402"]
WARNING_ERROR_INFO = ["node type=HBM, sensor type=Memory, event state=single bit ECC error"]


# `npu-smi info -t ecc` HBM counters, in the order printed (npu_info_print.c
# printf_hbm_ecc_info, then the two Next-Isolated lines of show_hbm_ecc_info on 910B).
ECC_FIELDS = ("single_bit", "multi_bit", "single_bit_total", "multi_bit_total",
              "single_bit_isolated_pages", "multi_bit_isolated_pages",
              "single_bit_next_isolated_pages", "multi_bit_next_isolated_pages")

# Transient readings kept beside state.json, not in it: the simulated tools never write
# state.json (a fault's read-modify-write of it would race with them).
# temp-spike/<npu>: "<spiked reads left> <celsius> <shown until (epoch)>", consumed by
# `npu-smi info -t temp`; link-events/<port>: "<epoch> <1 up|0 down>" lines appended by
# the `roce-flap` loop, read by `hccn_tool -link_stat` after the state's link_history.
SPIKE_DIR = os.path.join(os.path.dirname(STATE_PATH), "temp-spike")
LINK_EVENTS_DIR = os.path.join(os.path.dirname(STATE_PATH), "link-events")
# After the spiked `-t temp` read, the main table and `-t common` still show the spike
# for this long: the rest of the same reading of the node.
SPIKE_WINDOW_S = 2.0


def _seeded(seed: str, n: int) -> list[int]:
    import hashlib

    digest = hashlib.sha256(seed.encode()).digest()
    while len(digest) < n * 4:
        digest += hashlib.sha256(digest).digest()
    return [int.from_bytes(digest[i * 4:i * 4 + 4], "big") for i in range(n)]


def default_state(*, node: str = "node0", chip: str = "910B3", npus: int = 8,
                  cpus: int | None = None, iface_prefix: str = "eth") -> dict:
    """The healthy state of one node: every value the simulated tools print."""
    if chip not in CHIPS:
        raise ValueError(f"unsupported chip {chip!r}; one of {', '.join(CHIPS)}")
    info = CHIPS[chip]
    ncpu = cpus or os.cpu_count() or 1
    npu_list = []
    for i in range(npus):
        bus = A2_BUS_IDS[i] if i < len(A2_BUS_IDS) else f"0000:{0x90 + i:02X}:00.0"
        words = _seeded(f"{node}/{i}", 10)
        npu_list.append({
            "id": i,
            "bus_id": bus,
            "health": "OK",
            "error_codes": [],
            "error_info": [],
            "power": round(86.0 + (words[0] % 150) / 10, 1),
            "temp": 39 + words[1] % 8,
            "aicore_usage": 0,
            "hbm_total": info["hbm_mb"],
            "hbm_used": 3378 + words[2] % 12,
            "hugepages_used": 0,
            "hugepages_total": 0,
            "serial": f"1025C9{words[3] % 1000000:06d}",
            "vdie_id": " ".join(f"{w:08X}" for w in words[4:9]),
            "ndie_id": " ".join(f"{w:08X}" for w in _seeded(f"ndie/{node}/{i}", 5)),
            "tls": 0,
            "net_health": None,
            "cpu_affinity": f"0-{ncpu - 1}",
            "hbm_ecc": dict.fromkeys(ECC_FIELDS, 0),
            "hbm_temp": 35 + words[9] % 5,
            "mcu_temp": 36 + words[9] % 4,
        })
    return {
        "schema": SCHEMA,
        "node": node,
        "chip": chip,
        "npu_smi_version": DEFAULT_DRIVER["Version"],
        "aicore_count": info["aicore_count"],
        "driver_loaded": True,
        "visible_npus": npus,
        "npus": npu_list,
        "processes": [],
        "driver": dict(DEFAULT_DRIVER),
        "firmware": dict(DEFAULT_FIRMWARE),
        "toolkit": dict(DEFAULT_TOOLKIT),
        "toolkit_running": DEFAULT_TOOLKIT_RUNNING,
        "roce": {"iface_prefix": iface_prefix},
        "link_history": {str(i): [] for i in range(npus)},
        "bios": {"sriov": False, "acs": False, "above4g": True},
        "board": {"product_name": "IT21HMDC_Bin5", "model": "NA", "manufacturer": "Huawei",
                  "board_id": 0x60, "pcb_id": "A", "bom_id": 1,
                  "subsystem_vendor": 0x19E5, "subsystem_device": 0x3003},
    }


def major_version(version: str) -> int:
    """The leading number of a version string ("25.2.0" -> 25; none -> 0)."""
    digits = len(version) - len(version.lstrip("0123456789"))
    return int(version[:digits]) if digits else 0


def load(path: str | None = None) -> dict:
    """The node state: state.json, through a marshal copy (state.json.marshal) kept next
    to it and trusted only while state.json's inode, size and mtime are unchanged."""
    path = path or STATE_PATH
    cache = path + ".marshal"
    source = os.stat(path)
    stamp = (source.st_ino, source.st_size, source.st_mtime_ns)
    try:
        with open(cache, "rb") as handle:
            cached_stamp, state = marshal.load(handle)
        if tuple(cached_stamp) == stamp:
            return state
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import json

    with open(path) as handle:
        state = json.load(handle)
    try:
        partial = f"{cache}.{os.getpid()}"
        with open(partial, "wb") as handle:
            marshal.dump((stamp, state), handle)
        os.replace(partial, cache)
    except OSError:
        pass    # a read-only state directory: every call parses the JSON
    return state


def save(state: dict, path: str | None = None) -> None:
    import json
    import tempfile

    target = path or STATE_PATH
    directory = os.path.dirname(target) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, target)


def visible(state: dict) -> list[dict]:
    """The NPUs the driver reports (a `npu-missing` fault hides the last ones)."""
    return state["npus"][: state.get("visible_npus", len(state["npus"]))]


class TempSpikes:
    """The pending temperature spikes of a node (files in SPIKE_DIR, see above)."""

    def __init__(self, directory: str | None = None, clock=None) -> None:
        self.directory = directory or SPIKE_DIR
        self.clock = clock

    def _now(self) -> float:
        if self.clock is not None:
            return self.clock()
        import time

        return time.time()

    def _read(self, npu: int) -> tuple[int, int, float] | None:
        try:
            with open(f"{self.directory}/{npu}") as handle:
                reads, celsius, until = handle.read().split()
            return int(reads), int(celsius), float(until)
        except (OSError, ValueError):
            return None

    def peek(self, npu: int) -> int | None:
        """The spiked temperature while a spike is pending or within its window."""
        entry = self._read(npu)
        if entry is None:
            return None
        reads, celsius, until = entry
        return celsius if reads > 0 or self._now() < until else None

    def take(self, npu: int) -> int | None:
        """The spiked temperature if a spiked read is left (one is used up), else None."""
        if not os.path.exists(f"{self.directory}/{npu}"):
            return None
        import fcntl

        fd = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entry = self._read(npu)
            if entry is None or entry[0] <= 0:
                return None
            reads, celsius, until = entry
            reads -= 1
            if reads == 0:
                until = self._now() + SPIKE_WINDOW_S
            write_spike(npu, reads, celsius, until, self.directory)
            return celsius
        finally:
            os.close(fd)


def write_spike(npu: int, reads: int, celsius: int, until: float = 0.0,
                directory: str | None = None) -> None:
    directory = directory or SPIKE_DIR
    os.makedirs(directory, exist_ok=True)
    tmp = f"{directory}/.{npu}.{os.getpid()}"
    with open(tmp, "w") as handle:
        handle.write(f"{reads} {celsius} {until}\n")
    os.replace(tmp, f"{directory}/{npu}")


def link_events(port: int, directory: str | None = None) -> list[dict]:
    """The link changes the `roce-flap` loop recorded for PORT, oldest first."""
    try:
        with open(f"{directory or LINK_EVENTS_DIR}/{port}") as handle:
            return parse_link_events(handle.read())
    except OSError:
        return []


def parse_link_events(text: str) -> list[dict]:
    events = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] in ("0", "1"):
            try:
                events.append({"time": float(fields[0]), "up": fields[1] == "1"})
            except ValueError:
                continue
    return events
