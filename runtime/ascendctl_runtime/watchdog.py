"""Restart the engine gracefully before NPU memory runs out.

    python3 -m ascendctl_runtime.watchdog /var/lib/ascendctl/releases/<id>/watchdog.json

vLLM reserves `gpu-memory-utilization` of HBM at start; usage that keeps climbing past
the threshold afterwards (leaks, fragmentation, a stray process) ends in an
out-of-memory crash mid-request. The watchdog reads `npu-smi info` every interval and,
after `consecutive` readings above the threshold on any NPU — and never while the engine
is still starting or within the cooldown after its last restart — asks for a restart and
logs which NPU and how full.

It never restarts the unit itself: one rank restarted alone cannot rejoin its group. The
request (a small JSON file, `request_file`) is published by this node's agent, and the
supervisor on the head restarts the whole group in rank order (docs/health.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Callable, Optional

from ascendctl.facts.npu_smi import NpuSmiInfo
from ascendctl_runtime import npu
from ascendctl_runtime.contract import WatchdogConfig


def fullest_chip(info: NpuSmiInfo) -> Optional[tuple[int, float, int, int]]:
    """(npu id, used fraction, used MB, total MB) of the fullest chip, if HBM is reported."""
    best = None
    for chip in info.chips:
        if chip.hbm_used_mb is None or not chip.hbm_total_mb:
            continue
        fraction = chip.hbm_used_mb / chip.hbm_total_mb
        if best is None or fraction > best[1]:
            best = (chip.npu_id, fraction, chip.hbm_used_mb, chip.hbm_total_mb)
    return best


class Watchdog:
    def __init__(self, config: WatchdogConfig,
                 read: Callable[[], tuple[Optional[NpuSmiInfo], str]] = npu.read_npu_info,
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.read = read
        self.clock = clock
        self.over_count = 0
        self.last_restart = float("-inf")

    def unit_active_for(self) -> Optional[float]:
        """Seconds since the unit last became active (None if it is not active)."""
        out = subprocess.run(
            ["systemctl", "show", "-p", "ActiveState", "-p", "ActiveEnterTimestampMonotonic",
             self.config.unit], capture_output=True, text=True).stdout
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if values.get("ActiveState") != "active":
            return None
        entered_us = int(values.get("ActiveEnterTimestampMonotonic", "0") or 0)
        return time.monotonic() - entered_us / 1e6

    def step(self, active_for: Optional[float]) -> Optional[str]:
        """One reading; returns the reason when the unit should be restarted now."""
        if active_for is None or active_for < self.config.startup_grace_seconds:
            self.over_count = 0
            return None
        info, error = self.read()
        if info is None:
            log(f"cannot read npu-smi: {error}")
            return None
        fullest = fullest_chip(info)
        if fullest is None or fullest[1] < self.config.threshold:
            self.over_count = 0
            return None
        self.over_count += 1
        npu_id, fraction, used, total = fullest
        if self.over_count < self.config.consecutive:
            return None
        if self.clock() - self.last_restart < self.config.cooldown_seconds:
            return None
        self.over_count = 0
        self.last_restart = self.clock()
        return (f"NPU {npu_id} HBM {used}/{total} MB = {fraction:.1%} above "
                f"{self.config.threshold:.0%} for {self.config.consecutive} readings")

    def request_restart(self, reason: str) -> dict:
        """Ask the supervisor (through this node's agent) for a gang restart."""
        from ascendctl_runtime.nodeutil import write_atomic

        request = {"id": uuid.uuid4().hex, "source": "hbm-watchdog", "unit": self.config.unit,
                   "reason": reason, "time": time.time()}
        if not self.config.request_file:
            raise ValueError("no request_file configured")
        write_atomic(self.config.request_file,
                     (json.dumps(request, sort_keys=True) + "\n").encode(), 0o644)
        return request

    def run_forever(self) -> None:
        log(f"watching {self.config.unit}: a gang restart is requested above "
            f"{self.config.threshold:.0%} HBM")
        while True:
            reason = self.step(self.unit_active_for())
            if reason:
                try:
                    request = self.request_restart(reason)
                    log(f"asked for a gang restart (request {request['id']}): {reason}")
                except (OSError, ValueError) as err:
                    log(f"cannot ask for a restart ({err}): {reason}")
            time.sleep(self.config.interval_seconds)


def log(message: str) -> None:
    print(f"ascendctl-watchdog: {message}", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        config = WatchdogConfig.load(args[0])
    except (OSError, ValueError, TypeError) as err:
        log(f"bad config: {err}")
        return 2
    try:
        Watchdog(config).run_forever()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
