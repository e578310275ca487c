"""The lab: a simulated Ascend cluster of real Linux nodes on one machine.

    from ascendctl_lab import Lab
    lab = Lab("mylab")
    lab.up(nodes=2, npus_per_node=8, chip="910B3")
    lab.exec("node0", ["npu-smi", "info"])
    lab.down()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Lab", "LabNode", "FAULT_KINDS"]

if TYPE_CHECKING:
    from ascendctl_lab.faults import FAULT_KINDS
    from ascendctl_lab.lab import Lab, LabNode


def __getattr__(name: str):
    if name in ("Lab", "LabNode"):
        from ascendctl_lab import lab as _lab

        return getattr(_lab, name)
    if name == "FAULT_KINDS":
        from ascendctl_lab.faults import FAULT_KINDS

        return FAULT_KINDS
    raise AttributeError(name)
