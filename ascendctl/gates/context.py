"""What a gate is given and what it gives back. A gate is one module of this package with
`NAME` and `run(ctx) -> GateResult` (registered in gates/runner.py): it measures through
the heads in the context and judges with ascendctl.promotion; it never stores or raises
for a failed judgment (the runner keeps the evidence and fails the step)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from ascendctl.gates.head import GateHead, LoadRun

if TYPE_CHECKING:
    from ascendctl.inventory import Inventory
    from ascendctl.inventory.promotion import PromotionSpec

# per-request records kept in the evidence per release (the pictures downsample further)
MAX_REQUEST_RECORDS = 5000
KEPT = ("i", "start_s", "ttft_ms", "e2e_ms", "tpot_ms", "output_tokens", "error")


@dataclass
class GateContext:
    inv: "Inventory"                    # the group's view
    spec: "PromotionSpec"
    group: str
    candidate: GateHead                 # the group's head, serving the new release
    previous: Optional[str]             # the release it replaced (None: the first one)
    live: Optional[GateHead]            # a head still serving PREVIOUS (another group)
    followers: list[GateHead] = field(default_factory=list)   # the group's other nodes
    say: Callable[[str], None] = lambda _msg: None

    @property
    def release(self) -> str:
        return self.candidate.release

    def stored(self, gate: str) -> Optional[dict[str, Any]]:
        """PREVIOUS's newest passing record of GATE, from a head that has one: the live
        head (where it was gated), else this group's head (before its switch)."""
        if self.previous is None:
            return None
        for head in ([self.live] if self.live else []) + [self.candidate]:
            record = head.stored_record(self.previous, gate)
            if record:
                return record
        return None


@dataclass
class GateResult:
    gate: str
    passed: bool
    summary: str                        # one line with the figures that decided it
    record: dict[str, Any]              # the evidence (verdict, figures, requests, ...)
    envelope: Optional[int] = None      # the envelope gate's measured concurrency


def timeline(runs: list[LoadRun], t0: float) -> dict[str, list[dict[str, Any]]]:
    """Each release's per-request records, their start times on one clock (seconds since
    T0), at most MAX_REQUEST_RECORDS each (evenly thinned)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        shift = run.started - t0
        rows = out.setdefault(run.release, [])
        for r in run.requests:
            row = {k: r.get(k) for k in KEPT}
            if isinstance(row["start_s"], (int, float)):
                row["start_s"] = round(float(row["start_s"]) + shift, 3)
            rows.append(row)
    for release, rows in out.items():
        if len(rows) > MAX_REQUEST_RECORDS:
            step = len(rows) / MAX_REQUEST_RECORDS
            out[release] = [rows[int(k * step)] for k in range(MAX_REQUEST_RECORDS)]
    return out
