"""`npu-smi info -t ecc -i N [-c C]`: the HBM ECC counters, single-bit (corrected) apart
from multi-bit (uncorrectable).

Format (npucli npu_info_print.c printf_hbm_ecc_info and npu_chip_info.c show_hbm_ecc_info,
verylucky01/driver @e29d066): `\\t%-40s : %u` lines `HBM Single Bit Error Count`,
`HBM Double Bit Error Count` (the current counts), `... Aggregate Total Err Cnt` (lifetime),
`... Isolated Pages Count`, and on 910B/910_93/950 `... Next-Isolated Pages Count`. A 910
(first generation) prints DDR lines first. No capture from a real 910B was found:
tests/fixtures/npu-smi_info_t_ecc.txt is built from these format strings and from the
vendor's documented examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ascendctl_runtime.faults.npu_health import npu_smi_lines
from ascendctl_runtime.faults.text import FaultParseError, key_value_lines, parse_count

WHAT = "npu-smi info -t ecc"
_FIELDS = {
    "HBM Single Bit Error Count": "single_bit",
    "HBM Double Bit Error Count": "multi_bit",
    "HBM Single Bit Aggregate Total Err Cnt": "single_bit_total",
    "HBM Double Bit Aggregate Total Err Cnt": "multi_bit_total",
    "HBM Single Bit Isolated Pages Count": "single_bit_isolated_pages",
    "HBM Double Bit Isolated Pages Count": "multi_bit_isolated_pages",
}
_REQUIRED = ("single_bit", "multi_bit")


@dataclass(frozen=True)
class EccReading:
    single_bit: int                              # corrected, current count
    multi_bit: int                               # uncorrectable ("Double Bit"), current count
    single_bit_total: Optional[int] = None       # lifetime
    multi_bit_total: Optional[int] = None
    single_bit_isolated_pages: Optional[int] = None
    multi_bit_isolated_pages: Optional[int] = None


def parse_ecc(text: str) -> EccReading:
    lines = npu_smi_lines(text, WHAT)
    values: Dict[str, int] = {}
    for number, key, value in key_value_lines(lines):
        field = _FIELDS.get(key)
        if field is None:
            continue
        if field in values:
            raise FaultParseError(WHAT, f"{key} twice: one chip's output expected", number)
        values[field] = parse_count(value, WHAT, key, number)
    missing = [key for key, field in _FIELDS.items() if field in _REQUIRED and field not in values]
    if missing:
        raise FaultParseError(WHAT, "no " + " or ".join(repr(m) for m in missing) + " line")
    return EccReading(**values)
