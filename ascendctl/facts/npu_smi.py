"""`npu-smi info`: the main table (devices, then processes).

Never parsed by column offset (widths drift between 93 and 116 characters across
versions). Lines starting with `|` are split on `|` and each cell on whitespace; the
two lines of a device block are told apart by content (the second carries the PCIe
Bus-Id), so the A2 (910B), A3 (dual-die, `Chip Phy-ID`), first-generation 910,
310/310P and 950 layouts all go through the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from ascendctl.facts.fact import Fact
from ascendctl.facts.params import NPU_SMI_TOOL
from ascendctl.facts.versions import Version, try_parse_version

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_USED_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")
_NO_PROC = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_VERSION_LINE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_DRIVER_WARNING = "The driver package may not be completely installed"
_DCMI_ERROR = re.compile(r"dcmi module initialize failed\.\s*ret is\s*(-?\d+)", re.IGNORECASE)

HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")


class TableLayout(str, Enum):
    A2 = "a2"            # `| Chip | Bus-Id | ... HBM-Usage(MB) |` (910B and first-gen 910)
    A3 = "a3"            # `| Chip  Phy-ID | ...` dual-die 910_93
    INFERENCE = "310"    # `| Chip    Device | ...` no HBM column (310 / 310P)
    V2 = "950"           # `| NPU ID | Name | ...` (950 / npu-smi v2)
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NpuChip:
    """One chip (die) row pair of the main table."""

    npu_id: int
    chip_id: int
    phy_id: int | None          # A3 only: the physical device id (`hccn_tool -i`)
    name: str
    health: str
    power_w: float | None       # None for `-` (A3 die 1) and `NA` (310P)
    temp_c: int | None
    hugepages_used: int | None
    hugepages_total: int | None
    bus_id: str
    aicore_pct: int | None
    ddr_used_mb: int | None
    ddr_total_mb: int | None
    hbm_used_mb: int | None     # None on 310/310P (no HBM column)
    hbm_total_mb: int | None

    @property
    def hbm_free_mb(self) -> int | None:
        if self.hbm_used_mb is None or self.hbm_total_mb is None:
            return None
        return self.hbm_total_mb - self.hbm_used_mb


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int | None
    pid: int
    name: str                   # truncated to 15 characters by npu-smi; empty in containers
    memory_mb: int


@dataclass(frozen=True)
class NpuSmiInfo:
    """What `npu-smi info` printed. `error` is set when it printed no table."""

    tool_version: str | None
    driver_version: str | None
    layout: TableLayout
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    idle_npus: tuple[int, ...]              # NPUs with "No running processes found"
    driver_incomplete_warning: bool
    error: str | None = None
    error_code: int | None = None           # e.g. -8005 from dcmi

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def npu_ids(self) -> tuple[int, ...]:
        return tuple(sorted({c.npu_id for c in self.chips}))

    @property
    def driver(self) -> Version | None:
        return try_parse_version(self.driver_version) if self.driver_version else None


def _cells(line: str) -> list[str]:
    parts = line.strip().split("|")
    # a table line starts and ends with '|': drop the empty outer pieces
    if parts and parts[0].strip() == "":
        parts = parts[1:]
    if parts and parts[-1].strip() == "":
        parts = parts[:-1]
    return [p.strip() for p in parts]


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _used_total(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in _USED_TOTAL.findall(text)]


def _detect_layout(lines: list[str]) -> TableLayout:
    for line in lines:
        if not line.lstrip().startswith("|"):
            continue
        cells = _cells(line)
        joined = " ".join(cells)
        if "NPU ID" in joined and "Name" in joined and "Health" in joined:
            return TableLayout.V2
        if cells and cells[0].split()[:1] == ["Chip"]:
            words = cells[0].split()
            if "Phy-ID" in words:
                return TableLayout.A3
            if "Device" in words:
                return TableLayout.INFERENCE
            return TableLayout.A2
    return TableLayout.UNKNOWN


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse the main `npu-smi info` output (stdout and stderr together)."""
    lines = text.splitlines()
    warning = any(_DRIVER_WARNING in line for line in lines)
    m_err = _DCMI_ERROR.search(text)
    version = next((_VERSION_LINE.search(line) for line in lines if _VERSION_LINE.search(line)), None)
    layout = _detect_layout(lines)

    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    idle: list[int] = []
    in_processes = False
    pending: list[str] | None = None   # first line of a device block, waiting for its second

    for line in lines:
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue
        cells = _cells(stripped)
        joined = " ".join(cells)
        if "Process id" in joined or "Process name" in joined:
            in_processes = True
            pending = None
            continue
        if in_processes:
            m = _NO_PROC.search(joined)
            if m:
                idle.append(int(m.group(1)))
                continue
            proc = _parse_process_row(cells)
            if proc is not None:
                processes.append(proc)
            continue
        if version is not None and _VERSION_LINE.search(joined):
            continue
        if layout == TableLayout.V2 and len(cells) >= 4:
            # `| 0 | xxx | OK | ...` / `|  |  | 0000:91:00.0 | ...`: fold to the v1 shape
            cells = [f"{cells[0]} {cells[1]}".strip()] + cells[2:]
        if len(cells) < 3:
            continue
        first_words = cells[0].split()
        if first_words[:1] in (["NPU"], ["Chip"]):
            continue  # header rows
        if _BUS_ID.match(cells[1]):
            if pending is not None:
                chip = _parse_device_block(pending, cells, layout)
                if chip is not None:
                    chips.append(chip)
            pending = None
        else:
            pending = cells

    error = None
    if m_err:
        error = m_err.group(0)
    elif not chips:
        meaningful = [line for line in lines if line.strip()]
        error = "npu-smi info printed no device table" if not meaningful else (
            "npu-smi info printed no device table: " + meaningful[0].strip()[:200])
    return NpuSmiInfo(
        tool_version=version.group(1) if version else None,
        driver_version=version.group(2) if version else None,
        layout=layout,
        chips=tuple(chips),
        processes=tuple(processes),
        idle_npus=tuple(idle),
        driver_incomplete_warning=warning,
        error=error,
        error_code=int(m_err.group(1)) if m_err else None,
    )


def _parse_device_block(first: list[str], second: list[str], layout: TableLayout) -> NpuChip | None:
    head = first[0].split()
    if not head or _int(head[0]) is None:
        return None
    npu_id = int(head[0])
    name = " ".join(head[1:])
    health = first[1].split()[0] if first[1].split() else ""
    metrics = first[2].split() if len(first) > 2 else []
    power = _float(metrics[0]) if metrics else None
    temp = _int(metrics[1]) if len(metrics) > 1 else None
    huge = _used_total(first[2]) if len(first) > 2 else []

    chip_words = second[0].split()
    chip_id = _int(chip_words[0]) if chip_words else None
    phy_id = None
    if layout == TableLayout.A3 and len(chip_words) > 1:
        phy_id = _int(chip_words[1])
    bus_id = second[1]
    usage = second[2] if len(second) > 2 else ""
    usage_words = usage.split()
    aicore = _int(usage_words[0]) if usage_words else None
    pairs = _used_total(usage)
    ddr = pairs[0] if pairs else (None, None)
    hbm = pairs[1] if len(pairs) > 1 else (None, None)
    return NpuChip(
        npu_id=npu_id,
        chip_id=chip_id if chip_id is not None else 0,
        phy_id=phy_id,
        name=name,
        health=health,
        power_w=power,
        temp_c=temp,
        hugepages_used=huge[0][0] if huge else None,
        hugepages_total=huge[0][1] if huge else None,
        bus_id=bus_id,
        aicore_pct=aicore,
        ddr_used_mb=ddr[0],
        ddr_total_mb=ddr[1],
        hbm_used_mb=hbm[0],
        hbm_total_mb=hbm[1],
    )


def _parse_process_row(cells: list[str]) -> NpuProcess | None:
    # v1: `| NPU Chip | PID | name | mem |`; v2 (950): `| NPU | PID | name | mem |`
    if len(cells) < 4:
        return None
    ids = cells[0].split()
    pid = _int(cells[1])
    mem = _int(cells[3].split()[0]) if cells[3].split() else None
    if not ids or _int(ids[0]) is None or pid is None or mem is None:
        return None
    chip = _int(ids[1]) if len(ids) > 1 else None
    return NpuProcess(npu_id=int(ids[0]), chip_id=chip, pid=pid, name=cells[2], memory_mb=mem)


NPU_SMI = Fact("npu_smi", section="npu_smi_info", command=f"{NPU_SMI_TOOL} info",
               parse=parse_npu_smi_info, reads_stderr=True, check_rc=False)
