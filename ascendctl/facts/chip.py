"""Which Ascend generation a node carries, from several pieces of evidence.

First-generation Ascend 910 SKUs also print `910B` in `npu-smi info`; they are told
apart by their on-card DDR (non-zero `Memory-Usage`, forced to `0 / 0` on 910B/A3),
the PCI device id (`d801` vs `d802`/`d803`), or the chip-level board `Chip Name`
(`910A`, `910ProA`, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from ascendctl.facts.fact import Derived, Reading
from ascendctl.facts.npu_smi import NPU_SMI, NpuSmiInfo, TableLayout
from ascendctl.facts.npu_smi_detail import BOARD, CHIP_BOARD, BoardInfo
from ascendctl.facts.pci import PCI, PciInventory


class ChipFamily(str, Enum):
    A2_910B = "910B"           # Atlas 800T/800I A2: 910B1..B4 (d802)
    A3_910_93 = "910_93"       # Atlas 800 A3: dual-die Ascend910 (d803)
    GEN1_910 = "910"           # first-generation 910 (d801): not supported by vllm-ascend
    INFERENCE_310 = "310"      # 310 / 310B / 310P inference cards: not supported here
    GEN_950 = "950"            # 950 / A5: not supported by this version
    UNKNOWN = "unknown"

    @property
    def supported(self) -> bool:
        return self in (ChipFamily.A2_910B, ChipFamily.A3_910_93)


_DEVICE_FAMILY = {0xD801: ChipFamily.GEN1_910, 0xD802: ChipFamily.A2_910B,
                  0xD803: ChipFamily.A3_910_93, 0xD806: ChipFamily.GEN_950,
                  0xD100: ChipFamily.INFERENCE_310, 0xD500: ChipFamily.INFERENCE_310,
                  0xD105: ChipFamily.INFERENCE_310}
_GEN1_NAMES = re.compile(r"^(?:Ascend\s*)?910(?:A|B|ProA|ProB|PremiumA)?$", re.IGNORECASE)
_A2_NAMES = re.compile(r"^(?:Ascend\s*)?910B\d\w*$", re.IGNORECASE)


@dataclass(frozen=True)
class ChipIdentity:
    family: ChipFamily
    model: str | None          # `910B3`, `Ascend910`, `910A`, `310P3` ...
    evidence: tuple[str, ...]  # what decided it, for the report


def classify_chip(info: NpuSmiInfo | None, board: BoardInfo | None = None,
                  chip_board: BoardInfo | None = None, pci: PciInventory | None = None) -> ChipIdentity:
    evidence: list[str] = []
    names = sorted({c.name for c in info.chips}) if info and info.chips else []
    model = names[0] if len(names) == 1 else (", ".join(names) if names else None)

    # The PCI device id is the most direct evidence.
    dev_ids = set()
    if board and board.pci_device_id:
        dev_ids.add(board.pci_device_id)
        evidence.append(f"npu-smi board PCI Device ID 0x{board.pci_device_id:04X}")
    if pci:
        for d in pci.npus():
            if d.device_id is not None:
                dev_ids.add(d.device_id)
        if pci.npus():
            evidence.append("lspci devices " + ",".join(sorted({f"{d.device_id:04x}" for d in pci.npus()
                                                                if d.device_id is not None})))
    families = {_DEVICE_FAMILY[d] for d in dev_ids if d in _DEVICE_FAMILY}
    if len(families) == 1:
        return ChipIdentity(families.pop(), model, tuple(evidence))

    if chip_board and chip_board.chip_name:
        evidence.append(f"board Chip Name {chip_board.chip_name}")
        if _GEN1_NAMES.match(chip_board.chip_name) and not chip_board.npu_name:
            return ChipIdentity(ChipFamily.GEN1_910, chip_board.chip_name, tuple(evidence))
        if chip_board.npu_name:
            return ChipIdentity(ChipFamily.A3_910_93, chip_board.soc_name, tuple(evidence))
        if _A2_NAMES.match(chip_board.chip_name):
            return ChipIdentity(ChipFamily.A2_910B, chip_board.chip_name, tuple(evidence))

    if info is None or not info.chips:
        return ChipIdentity(ChipFamily.UNKNOWN, model, tuple(evidence))
    if info.layout == TableLayout.INFERENCE or any(n.startswith("310") for n in names):
        evidence.append("310/310P table layout")
        return ChipIdentity(ChipFamily.INFERENCE_310, model, tuple(evidence))
    if info.layout == TableLayout.V2:
        evidence.append("npu-smi v2 (950) table layout")
        return ChipIdentity(ChipFamily.GEN_950, model, tuple(evidence))
    if info.layout == TableLayout.A3:
        evidence.append("A3 table layout (Chip Phy-ID)")
        return ChipIdentity(ChipFamily.A3_910_93, model, tuple(evidence))
    ddr_nonzero = any((c.ddr_total_mb or 0) > 0 for c in info.chips)
    if ddr_nonzero:
        evidence.append("on-card DDR reported (first-generation 910)")
        return ChipIdentity(ChipFamily.GEN1_910, model, tuple(evidence))
    if names and all(_A2_NAMES.match(n) for n in names):
        evidence.append("name 910Bx with DDR 0 / 0")
        return ChipIdentity(ChipFamily.A2_910B, model, tuple(evidence))
    if names and all(_GEN1_NAMES.match(n) for n in names):
        # bare `910B` with DDR 0/0 is ambiguous without the board or PCI id
        evidence.append(f"name {model} is ambiguous without PCI device id")
        return ChipIdentity(ChipFamily.UNKNOWN, model, tuple(evidence))
    return ChipIdentity(ChipFamily.UNKNOWN, model, tuple(evidence))


def _chip(r: Reading) -> ChipIdentity | None:
    info = r[NPU_SMI]
    return classify_chip(info, board=r[BOARD], chip_board=r[CHIP_BOARD], pci=r[PCI]) if info else None


CHIP = Derived("chip", _chip)
