"""Read the local NPUs through the real driver tools (npu-smi, hccn_tool).

The parsing is ascendctl.facts — pure, standard-library code shipped with the runtime —
so the exporter, the watchdog and the controller's preflight read the tools the same way.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Optional

from ascendctl.facts.hccn import parse_link, parse_net_health
from ascendctl.facts.npu_smi import NpuSmiInfo, parse_npu_smi_info

NPU_SMI = "npu-smi"
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
TOOL_TIMEOUT = 15.0


def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: timed out after {timeout:.0f}s"
    return done.returncode, done.stdout + done.stderr


def read_npu_info() -> tuple[Optional[NpuSmiInfo], str]:
    """Parsed `npu-smi info`, or None and the reason."""
    code, text = run_tool([NPU_SMI, "info"])
    info = parse_npu_smi_info(text)
    if code != 0 or not info.ok:
        return None, (info.error or text.strip() or f"npu-smi exited {code}")[:500]
    return info, ""


class CachedReader:
    """`npu-smi info` read at most once per max_age seconds, shared by the exporter's
    scrapes and the node agent (npu-smi is slow on real hardware)."""

    def __init__(self, read=read_npu_info, clock=time.monotonic):
        self._read, self._clock = read, clock
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._value: tuple[Optional[NpuSmiInfo], str] = (None, "not read yet")

    def read(self, max_age: float) -> tuple[Optional[NpuSmiInfo], str]:
        with self._lock:
            if self._clock() - self._at >= max_age:
                self._value = self._read()
                self._at = self._clock()
            return self._value


@dataclass(frozen=True)
class PortState:
    device_id: int
    link_up: Optional[bool]        # None: hccn_tool failed
    net_health_ok: Optional[bool]


def read_port(device_id: int) -> PortState:
    code, text = run_tool([HCCN_TOOL, "-i", str(device_id), "-link", "-g"])
    link = parse_link(text) if code == 0 else None
    code, text = run_tool([HCCN_TOOL, "-i", str(device_id), "-net_health", "-g"])
    health = parse_net_health(text) if code == 0 else None
    return PortState(
        device_id=device_id,
        link_up=None if link is None else link.upper() == "UP",
        net_health_ok=None if health is None else health == "Success",
    )
