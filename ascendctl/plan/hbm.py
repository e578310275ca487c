"""The HBM total an engine budgets from, per chip.

vllm-ascend requests `total x gpu_memory_utilization`, where the total is
`torch.npu.mem_get_info()`'s (`vllm_ascend/worker/worker.py`: `requested_memory =
init_snapshot.total_memory * gpu_memory_utilization`, the same in every sdist from
0.17.0rc1 to 0.30.0rc2). That total is smaller than the HBM size: on a 64 GB 910B it is
65,452,113,920 B (60.96 GiB), while npu-smi's `HBM-Usage(MB)` column shows a total of
65536 MB, the nominal size (so no fact ascendctl reads gives the usable total).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30

B64_TOTAL = 65_452_113_920
# 65452113920 B in vllm-ascend's worker log (vllm-ascend#4404, #5917); 60.96 GiB in its
# start-up check (vllm-ascend#8621: "(27.18/60.96 GiB) ... (0.9, 54.86 GiB)") and in
# torch_npu's OOM message (vllm-ascend#2378, #5020, #6611)
B64_SOURCE = ("torch.npu.mem_get_info() total of a 64 GB 910B: vllm-ascend#4404, #5917 "
              "(65452113920 B), #8621 (60.96 GiB)")
# One published figure for an A3 die, rounded to 0.01 GiB: taken at the low end.
A3_TOTAL = int(61.265 * GIB) // (1 << 20) << 20
A3_SOURCE = ("torch_npu's '61.27 GiB total capacity' of an A3 die (sgl-project/sglang#29838), "
             "taken at 61.265 GiB; no vllm-ascend log of it found")


@dataclass(frozen=True)
class HbmTotal:
    total_bytes: int             # mem_get_info's total: what the budget starts from
    nominal_bytes: int           # the HBM size (npu-smi's total)
    source: str
    verified: bool

    def describe(self) -> str:
        flag = "" if self.verified else " [unverified]"
        return (f"{self.total_bytes / GIB:.2f} GiB of {self.nominal_bytes / GIB:.0f} GiB HBM "
                f"per NPU{flag} ({self.source})")

    def as_dict(self) -> dict:
        return {"total_bytes": self.total_bytes, "nominal_bytes": self.nominal_bytes,
                "source": self.source, "verified": self.verified}


_B64 = HbmTotal(B64_TOTAL, 64 * GIB, B64_SOURCE, True)
CHIP_TOTALS: dict[str, HbmTotal] = {
    "910B1": _B64, "910B2": _B64, "910B2C": _B64, "910B3": _B64,
    "910B4": HbmTotal(32 * GIB - (64 * GIB - B64_TOTAL), 32 * GIB,
                      "derived: 32 GiB minus the 3.04 GiB a 64 GB 910B does not report; no "
                      "published 910B4 total found", False),
    "Ascend910_93": HbmTotal(A3_TOTAL, 64 * GIB, A3_SOURCE, False),
}


def usable_total(chip: str, hbm_gib: int | None = None) -> HbmTotal:
    """The chip's row; `cluster.hbm_gib` other than the chip's size is derived from it by
    the same reservation."""
    row = CHIP_TOTALS[chip]
    if hbm_gib is None or hbm_gib * GIB == row.nominal_bytes:
        return row
    reserved = row.nominal_bytes - row.total_bytes
    return HbmTotal(max(0, hbm_gib * GIB - reserved), hbm_gib * GIB,
                    f"derived: cluster.hbm_gib {hbm_gib} minus the {reserved / GIB:.2f} GiB a "
                    f"{chip} does not report", False)
