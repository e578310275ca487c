"""The figures ascendctl reads from vLLM's `bench serve` result JSON (never recomputed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from ascendctl.errors import AscendctlError

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
REQUIRED = ("completed", "output_throughput", "duration")


@dataclass(frozen=True)
class BenchFigures:
    completed: int
    failed: int
    num_prompts: Optional[int]
    duration_s: float
    request_throughput: Optional[float]
    output_throughput: float            # output tokens / s, whole deployment
    total_token_throughput: Optional[float]
    total_input_tokens: Optional[int]
    total_output_tokens: Optional[int]
    max_concurrency: Optional[int]
    latency_ms: dict[str, dict[str, float]]   # metric → {"mean", "median", "p99", ...}

    def latency(self, metric: str, stat: str) -> Optional[float]:
        return self.latency_ms.get(metric, {}).get(stat)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(data: dict[str, Any], key: str) -> Optional[float]:
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def parse_result(data: Any) -> BenchFigures:
    """BenchFigures from vLLM's result JSON; raises AscendctlError if it is not one."""
    if not isinstance(data, dict):
        raise AscendctlError("vllm bench serve wrote no result object")
    missing = [key for key in REQUIRED if _number(data, key) is None]
    if missing:
        raise AscendctlError(f"vllm bench serve result lacks {', '.join(missing)}")
    latency: dict[str, dict[str, float]] = {}
    for metric in LATENCY_METRICS:
        stats: dict[str, float] = {}
        for key, value in data.items():
            if not key.endswith(f"_{metric}_ms") or _number(data, key) is None:
                continue
            stat = key[: -len(f"_{metric}_ms")]
            if stat in ("mean", "median", "std") or (stat.startswith("p") and
                                                     stat[1:].replace(".", "").isdigit()):
                stats[stat] = float(value)
        if stats:
            latency[metric] = stats
    completed = int(data["completed"])
    failed = data.get("failed")
    num_prompts = data.get("num_prompts")
    if not isinstance(failed, int):
        failed = int(num_prompts) - completed if isinstance(num_prompts, int) else 0
    return BenchFigures(
        completed=completed, failed=failed,
        num_prompts=int(num_prompts) if isinstance(num_prompts, int) else None,
        duration_s=float(data["duration"]),
        request_throughput=_number(data, "request_throughput"),
        output_throughput=float(data["output_throughput"]),
        total_token_throughput=_number(data, "total_token_throughput"),
        total_input_tokens=_int(data.get("total_input_tokens")),
        total_output_tokens=_int(data.get("total_output_tokens")),
        max_concurrency=_int(data.get("max_concurrency")),
        latency_ms=latency,
    )


def _int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None
