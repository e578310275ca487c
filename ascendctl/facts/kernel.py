"""Kernel settings a serving node should have, read from /proc/sys.

`kernel.numa_balancing` (include/linux/sched/sysctl.h): 0 off, bit 0x1 the kernel
unmaps pages and migrates them towards the CPUs that touch them, bit 0x2 memory
tiering. The file is absent when the kernel is built without CONFIG_NUMA_BALANCING.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.facts.fact import Fact


@dataclass(frozen=True)
class NumaBalancing:
    mode: int | None            # None: the kernel has no automatic NUMA balancing

    @property
    def enabled(self) -> bool:
        return bool(self.mode)


def parse_numa_balancing(text: str) -> NumaBalancing:
    """`/proc/sys/kernel/numa_balancing`: one number, or nothing when the file is absent."""
    value = text.strip()
    if not value:
        return NumaBalancing(None)
    if not value.isdigit():
        raise ValueError(f"kernel.numa_balancing is {value!r}, not a number")
    return NumaBalancing(int(value))


NUMA_BALANCING = Fact(
    "numa_balancing",
    command="if [ -e /proc/sys/kernel/numa_balancing ]; then cat /proc/sys/kernel/numa_balancing; fi",
    parse=parse_numa_balancing,
)
