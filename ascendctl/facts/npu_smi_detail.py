"""`npu-smi info -t board|health|memory|usages|common|topo`, `-m` and `-l`.

Key/value outputs are printed as `\\t%-30s : %s` (some 40 wide, some `%-30s:`, docs
render the TAB as spaces). Lines are split on the first `:`; a line whose key is
empty continues the previous value (multi-line `Error Information`). Outputs with
several chips repeat sections separated by blank lines; in `usages`/`common` the
`Chip ID` line comes at the END of its section, and an MCU section may follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from ascendctl.facts.fact import Derived, Fact, KeyedFact, Reading
from ascendctl.facts.params import NPU_SMI_TOOL, GatherParams

_ERROR_MARKERS = (
    "Invalid card id",
    "Error parameter of",
    "Usage: npu-smi",
    "does not support querying",
    "dcmi module initialize failed",
    "There is no NPU card",
)


def npu_smi_error(text: str) -> str | None:
    """The error line npu-smi printed instead of its output, if any."""
    for line in text.splitlines():
        for marker in _ERROR_MARKERS:
            if marker in line:
                return line.strip()
    if not text.strip():
        return "no output"
    return None


KV = tuple[tuple[str, str], ...]


def parse_kv_sections(text: str) -> tuple[KV, ...]:
    """Blank-line separated sections of `key : value` lines (order kept)."""
    sections: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for raw in text.splitlines():
        if not raw.strip():
            if current:
                sections.append(current)
                current = []
            continue
        if ":" not in raw:
            continue
        key, _, value = raw.partition(":")
        key, value = key.strip(), value.strip()
        if not key:
            if current:
                k, v = current[-1]
                current[-1] = (k, f"{v}\n{value}" if v else value)
            elif sections:
                k, v = sections[-1][-1]
                sections[-1][-1] = (k, f"{v}\n{value}" if v else value)
            continue
        if key.startswith(("$", "#", "/")) or " npu-smi " in f" {key} ":
            continue  # a shell prompt or command echo, not output
        current.append((key, value))
    if current:
        sections.append(current)
    return tuple(tuple(s) for s in sections)


def _merged(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for section in parse_kv_sections(text):
        for k, v in section:
            out.setdefault(k, v)
    return out


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip(), 0) if value.strip().lower().startswith("0x") else int(value.strip())
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _na(value: str | None) -> str | None:
    if value is None or value.strip().upper() in ("", "NA", "N/A"):
        return None
    return value.strip()


# --- board ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BoardInfo:
    """`-t board -i N` (card level) or `-t board -i N -c C` (chip level)."""

    npu_id: int | None
    chip_id: int | None                 # chip-level output only
    npu_name: str | None                # A3 chip level (`9392`)
    chip_type: str | None               # A2/910 chip level (`Ascend`)
    chip_name: str | None               # `910B4`, `910A`, `Ascend910`
    chip_version: str | None
    product_name: str | None
    serial_number: str | None
    software_version: str | None        # card level: the driver
    firmware_version: str | None
    compatibility: str | None
    pcie_bus: str | None
    pci_vendor_id: int | None
    pci_device_id: int | None
    chip_count: int | None
    error: str | None = None

    @property
    def soc_name(self) -> str | None:
        """The SoC model as Huawei documents it: A2 `Ascend910B4`, A3 `Ascend910_9392`."""
        if self.chip_name is None:
            return None
        if self.npu_name:
            return f"{self.chip_name}_{self.npu_name}"
        return f"{self.chip_type or ''}{self.chip_name}"


def parse_board(text: str) -> BoardInfo:
    err = npu_smi_error(text)
    kv = _merged(text)
    if "NPU ID" not in kv and "Chip Name" not in kv:
        unknown = dict.fromkeys((f.name for f in fields(BoardInfo) if f.name != "error"), None)
        return BoardInfo(**unknown, error=err or "no board fields")
    return BoardInfo(
        npu_id=_int(kv.get("NPU ID")),
        chip_id=_int(kv.get("Chip ID")),
        npu_name=_na(kv.get("NPU Name")),
        chip_type=_na(kv.get("Chip Type")),
        chip_name=_na(kv.get("Chip Name")),
        chip_version=_na(kv.get("Chip Version")),
        product_name=_na(kv.get("Product Name")),
        serial_number=_na(kv.get("Serial Number")),
        software_version=_na(kv.get("Software Version")),
        firmware_version=_na(kv.get("Firmware Version")),
        compatibility=_na(kv.get("Compatibility")),
        pcie_bus=_na(kv.get("PCIe Bus Info")),
        pci_vendor_id=_int(kv.get("PCI Vendor ID") or kv.get("Vendor ID")),
        pci_device_id=_int(kv.get("PCI Device ID") or kv.get("Device ID")),
        chip_count=_int(kv.get("Chip Count")),
    )


# --- health -----------------------------------------------------------------------------

@dataclass(frozen=True)
class HealthInfo:
    status: str | None                  # OK | Warning | Alarm | Critical | UNKNOWN
    error_codes: tuple[str, ...]        # hex codes, e.g. ('A4025021', '8C03A000')
    error_information: tuple[str, ...]
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.status == "OK" and not self.error_codes


def parse_health(text: str) -> HealthInfo:
    kv = _merged(text)
    status = kv.get("Health Status", kv.get("Health"))
    if status is None:
        return HealthInfo(None, (), (), error=npu_smi_error(text) or "no Health Status line")
    codes_text = _na(kv.get("Error Code")) or ""
    codes = tuple(codes_text.split())
    info_text = _na(kv.get("Error Information")) or ""
    info = tuple(line.strip() for line in info_text.splitlines() if line.strip())
    return HealthInfo(status=status.strip(), error_codes=codes, error_information=info)


# --- usages / common / memory ----------------------------------------------------------

@dataclass(frozen=True)
class ChipUsage:
    """One chip section of `-t usages` or `-t common` (fields absent are None)."""

    chip_id: int | None
    hbm_capacity_mb: int | None
    hbm_usage_pct: int | None
    ddr_capacity_mb: int | None
    ddr_usage_pct: int | None
    memory_usage_pct: int | None
    aicore_usage_pct: int | None
    aicore_freq_mhz: int | None
    aicore_count: int | None
    temperature_c: int | None
    power_w: float | None
    values: tuple[tuple[str, str], ...]


def _chip_sections(text: str) -> list[dict[str, str]]:
    """Split a multi-chip output into per-chip dicts. Chips are blank-line separated
    sections (a repeated key also starts a new chip); the card header (`NPU ID`,
    `Chip Count`) and MCU sections (`Chip Name : mcu`) are dropped."""
    chips: list[dict[str, str]] = []
    for section in parse_kv_sections(text):
        current: dict[str, str] = {}
        parts: list[dict[str, str]] = []
        for key, value in section:
            if key in ("NPU ID", "Chip Count"):
                continue
            if key in current:
                parts.append(current)
                current = {}
            current[key] = value
        if current:
            parts.append(current)
        chips.extend(p for p in parts if p.get("Chip Name", "").lower() != "mcu")
    return chips


def _usage_from(d: dict[str, str]) -> ChipUsage:
    return ChipUsage(
        chip_id=_int(d.get("Chip ID")),
        hbm_capacity_mb=_int(d.get("HBM Capacity(MB)")),
        hbm_usage_pct=_int(d.get("HBM Usage Rate(%)")),
        ddr_capacity_mb=_int(d.get("DDR Capacity(MB)")),
        ddr_usage_pct=_int(d.get("DDR Usage Rate(%)")),
        memory_usage_pct=_int(d.get("Memory Usage Rate(%)")),
        aicore_usage_pct=_int(d.get("Aicore Usage Rate(%)")),
        aicore_freq_mhz=_int(d.get("Aicore Freq(MHZ)")),
        aicore_count=_int(d.get("Aicore Count")),
        temperature_c=_int(d.get("Temperature(C)")),
        power_w=_float(d.get("NPU Real-time Power(W)")),
        values=tuple((k, v) for k, v in d.items()),
    )


def parse_usages(text: str) -> tuple[ChipUsage, ...]:
    """`-t usages -i N` (also accepts `-t common -i N`)."""
    return tuple(_usage_from(d) for d in _chip_sections(text))


parse_common = parse_usages


@dataclass(frozen=True)
class MemoryInfo:
    ddr_capacity_mb: int | None
    hbm_capacity_mb: int | None
    hbm_clock_mhz: int | None
    hbm_temperature_c: int | None
    hbm_manufacturer_id: str | None
    error: str | None = None


def parse_memory(text: str) -> MemoryInfo:
    kv = _merged(text)
    if "HBM Capacity(MB)" not in kv and "DDR Capacity(MB)" not in kv:
        return MemoryInfo(None, None, None, None, None, error=npu_smi_error(text) or "no memory fields")
    return MemoryInfo(
        ddr_capacity_mb=_int(kv.get("DDR Capacity(MB)")),
        hbm_capacity_mb=_int(kv.get("HBM Capacity(MB)")),
        hbm_clock_mhz=_int(kv.get("HBM Clock Speed(MHz)")),
        hbm_temperature_c=_int(kv.get("HBM Temperature(C)")),
        hbm_manufacturer_id=_na(kv.get("HBM Manufacturer ID")),
    )


# --- topo -------------------------------------------------------------------------------

_DEVICE_NAME = re.compile(r"^(?:NPU|Phy-ID)(\d+)$")


def parse_cpu_list(text: str) -> frozenset[int]:
    """`144-167`, `0-23,96-119`, `5` -> the set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return frozenset(cpus)


@dataclass(frozen=True)
class TopoDevice:
    device_id: int                      # NPU index (A2) or physical id (A3 `Phy-ID`)
    links: tuple[tuple[int, str], ...]  # (other device, X|HCCS|PIX|PXB|PHB|SYS|SIO|HCCS_SW|NA)
    cpu_affinity: frozenset[int] | None  # None when npu-smi prints no affinity column


@dataclass(frozen=True)
class NpuTopology:
    devices: tuple[TopoDevice, ...]
    has_cpu_affinity: bool
    error: str | None = None

    def affinity_of(self, device_id: int) -> frozenset[int] | None:
        for d in self.devices:
            if d.device_id == device_id:
                return d.cpu_affinity
        return None


def parse_topo(text: str) -> NpuTopology:
    header: list[str] | None = None
    devices: list[TopoDevice] = []
    for raw in text.splitlines():
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if header is None:
            if _DEVICE_NAME.match(tokens[0]) and not _DEVICE_NAME.match(tokens[1] if len(tokens) > 1 else ""):
                continue  # a data row before any header: ignore
            if all(_DEVICE_NAME.match(t) or re.match(r"^NIC\d+$", t) or t in ("CPU", "Affinity")
                   for t in tokens) and _DEVICE_NAME.match(tokens[0]):
                header = [t for t in tokens if t != "Affinity"]
            continue
        m = _DEVICE_NAME.match(tokens[0])
        if not m:
            continue
        values = tokens[1:]
        links: list[tuple[int, str]] = []
        affinity = None
        for col, value in zip(header, values):
            dm = _DEVICE_NAME.match(col)
            if dm:
                links.append((int(dm.group(1)), value))
            elif col == "CPU":
                affinity = parse_cpu_list(value) if re.match(r"^[\d,\-]+$", value) else None
        devices.append(TopoDevice(int(m.group(1)), tuple(links), affinity))
    if header is None:
        return NpuTopology((), False, error=npu_smi_error(text) or "no topology header")
    return NpuTopology(tuple(devices), "CPU" in header)


# --- -m / -l ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ChipMapping:
    npu_id: int
    chip_id: int
    logic_id: int | None                # `-` for the MCU
    phy_id: int | None                  # A3 `Chip Phy-ID` column
    chip_name: str                      # `Ascend 910B4`, `Mcu`


def parse_mapping(text: str) -> tuple[ChipMapping, ...]:
    """`npu-smi info -m`: columns split on runs of 2+ spaces or TABs (names hold one space)."""
    columns: list[str] | None = None
    rows: list[ChipMapping] = []
    for raw in text.splitlines():
        cells = [c for c in re.split(r"\t|\s{2,}", raw.strip()) if c]
        if not cells:
            continue
        if columns is None:
            if "NPU ID" in cells and "Chip Name" in cells:
                columns = cells
            continue
        if len(cells) < len(columns) or _int(cells[0]) is None:
            continue
        row = dict(zip(columns, cells))
        rows.append(ChipMapping(
            npu_id=int(row["NPU ID"]),
            chip_id=_int(row.get("Chip ID")) or 0,
            logic_id=_int(row.get("Chip Logic ID")),
            phy_id=_int(row.get("Chip Phy-ID")),
            chip_name=row.get("Chip Name", ""),
        ))
    return tuple(rows)


@dataclass(frozen=True)
class NpuListEntry:
    npu_id: int
    chip_count: int | None
    product_name: str | None


@dataclass(frozen=True)
class NpuList:
    total_count: int | None             # `Total Count` (servers) or `Card Count` (310/310B)
    npus: tuple[NpuListEntry, ...]
    error: str | None = None


def parse_list(text: str) -> NpuList:
    total = None
    entries: list[NpuListEntry] = []
    for section in parse_kv_sections(text):
        current: dict[str, str] | None = None
        for key, value in section:
            if key in ("Total Count", "Card Count"):
                total = _int(value)
            elif key == "NPU ID":
                if current is not None:
                    entries.append(_list_entry(current))
                current = {"NPU ID": value}
            elif current is not None:
                current[key] = value
        if current is not None:
            entries.append(_list_entry(current))
    if total is None and not entries:
        return NpuList(None, (), error=npu_smi_error(text) or "no Total Count")
    return NpuList(total, tuple(entries))


def _list_entry(d: dict[str, str]) -> NpuListEntry:
    return NpuListEntry(npu_id=_int(d["NPU ID"]) or 0, chip_count=_int(d.get("Chip Count")),
                        product_name=_na(d.get("Product Name")))


# --- the facts --------------------------------------------------------------------------

def _extended_cards(params: GatherParams) -> range:
    return range(params.npu_count) if params.extended else range(0)


TOPOLOGY = Fact("topology", section="npu_smi_topo", command=f"{NPU_SMI_TOOL} info -t topo",
                parse=parse_topo, reads_stderr=True)
MAPPING = Fact("mapping", section="npu_smi_m", command=f"{NPU_SMI_TOOL} info -m",
               parse=parse_mapping, reads_stderr=True, default=())
NPU_LIST = Fact("npu_list", section="npu_smi_l", command=f"{NPU_SMI_TOOL} info -l",
                parse=parse_list, reads_stderr=True)
# card 0 always; every card with `extended`
NPU_SMI_BOARD = KeyedFact(
    "npu_smi_board", keys=lambda p: range(p.npu_count) if p.extended else (0,),
    command=lambda n, p: f"{NPU_SMI_TOOL} info -t board -i {n}",
    parse=parse_board, reads_stderr=True, listed=False)
BOARD = Derived("board", lambda r: dict(r[NPU_SMI_BOARD]).get(0))
CHIP_BOARD = Fact("chip_board", section="npu_smi_board_chip:0:0",
                  command=f"{NPU_SMI_TOOL} info -t board -i 0 -c 0", parse=parse_board, reads_stderr=True)
NPU_SMI_HEALTH = KeyedFact(
    "npu_smi_health", arity=2,
    keys=lambda p: ((n, c) for n in range(p.npu_count) for c in range(p.chips_per_npu)),
    command=lambda key, p: f"{NPU_SMI_TOOL} info -t health -i {key[0]} -c {key[1]}",
    parse=parse_health, reads_stderr=True, check_rc=False, listed=False)
HEALTH = Derived("health", lambda r: tuple((n, c, h) for (n, c), h in r[NPU_SMI_HEALTH]))
NPU_SMI_USAGES = KeyedFact(
    "npu_smi_usages", keys=_extended_cards, command=lambda n, p: f"{NPU_SMI_TOOL} info -t usages -i {n}",
    parse=parse_usages, reads_stderr=True, listed=False)


def _flat_usages(r: Reading) -> tuple[tuple[int, ChipUsage], ...]:
    return tuple((n, u) for n, chips in r[NPU_SMI_USAGES] for u in chips)


USAGES = Derived("usages", _flat_usages)
NPU_SMI_COMMON = KeyedFact(
    "npu_smi_common", keys=_extended_cards, command=lambda n, p: f"{NPU_SMI_TOOL} info -t common -i {n}",
    parse=parse_common, reads_stderr=True, listed=False)
MEMORY = KeyedFact(
    "memory", section="npu_smi_memory", keys=_extended_cards,
    command=lambda n, p: f"{NPU_SMI_TOOL} info -t memory -i {n}", parse=parse_memory, reads_stderr=True)
