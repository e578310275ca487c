"""The verdict: vLLM's figures against the inventory's `slo` section (pure)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ascendctl.benchmark.figures import BenchFigures
from ascendctl.inventory.model import SloSpec

PASS, FAIL = "pass", "fail"


@dataclass(frozen=True)
class SloCheck:
    id: str             # slo.<name>, as in the inventory
    title: str
    measured: Optional[float]
    limit: float
    unit: str
    comparison: str     # ">=" or "<="
    status: str         # pass | fail

    @property
    def message(self) -> str:
        shown = "n/a" if self.measured is None else f"{self.measured:.2f}"
        return (f"{self.title}: {shown} {self.unit} (SLO {self.comparison} "
                f"{self.limit:g} {self.unit})")


@dataclass(frozen=True)
class Verdict:
    status: str                            # pass | fail
    npus: int
    output_tokens_per_s_per_npu: float
    checks: list[SloCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # failed requests and the like

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def summary(self) -> str:
        missed = [c.message for c in self.checks if c.status == FAIL] + self.problems
        if missed:
            return "FAIL: " + "; ".join(missed)
        if not self.checks:
            return "PASS (no SLO in the inventory's `slo` section: figures only)"
        return f"PASS: all {len(self.checks)} SLOs met"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()
        for check, raw in zip(self.checks, data["checks"]):
            raw["message"] = check.message
        return data


def evaluate(figures: BenchFigures, slo: SloSpec, npus: int) -> Verdict:
    per_npu = figures.output_throughput / max(1, npus)
    checks: list[SloCheck] = []

    def at_least(name: str, title: str, measured: Optional[float], limit: Optional[float],
                 unit: str) -> None:
        if limit is not None:
            ok = measured is not None and measured >= limit
            checks.append(SloCheck(f"slo.{name}", title, measured, limit, unit, ">=",
                                   PASS if ok else FAIL))

    def at_most(name: str, title: str, measured: Optional[float], limit: Optional[float],
                unit: str) -> None:
        if limit is not None:
            ok = measured is not None and measured <= limit
            checks.append(SloCheck(f"slo.{name}", title, measured, limit, unit, "<=",
                                   PASS if ok else FAIL))

    at_least("min_output_tokens_per_s_per_npu", "output tokens/s per NPU", per_npu,
             slo.min_output_tokens_per_s_per_npu, "tok/s")
    at_most("max_p99_ttft_ms", "p99 time to first token", figures.latency("ttft", "p99"),
            slo.max_p99_ttft_ms, "ms")
    at_most("max_p99_tpot_ms", "p99 time per output token", figures.latency("tpot", "p99"),
            slo.max_p99_tpot_ms, "ms")
    problems = []
    if figures.failed:
        problems.append(f"{figures.failed} of {figures.completed + figures.failed} requests "
                        "failed")
    if figures.completed == 0:
        problems.append("no request completed")
    status = FAIL if problems or any(c.status == FAIL for c in checks) else PASS
    return Verdict(status=status, npus=npus, output_tokens_per_s_per_npu=per_npu,
                   checks=checks, problems=problems)
