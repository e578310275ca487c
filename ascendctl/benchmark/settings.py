"""What a benchmark run asks of vLLM's own `vllm bench serve`, and its command line."""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from typing import Any, Optional

from ascendctl_runtime.nodeutil import http_url

from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.inventory.pd import entry_port

# The seeds' customer SLO was stated at batch 8, 512 tokens in, 256 out.
DEFAULT_INPUT_LEN = 512
DEFAULT_OUTPUT_LEN = 256
DEFAULT_CONCURRENCY = 8
PROMPTS_PER_SLOT = 4
PERCENTILES = "50,90,99"
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"


@dataclass(frozen=True)
class BenchSettings:
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    concurrency: int = DEFAULT_CONCURRENCY
    num_prompts: Optional[int] = None       # None: PROMPTS_PER_SLOT × concurrency
    request_rate: Optional[float] = None    # None: all at once, bounded by concurrency
    seed: int = 0
    timeout_s: float = 3600.0

    @property
    def prompts(self) -> int:
        return self.num_prompts or PROMPTS_PER_SLOT * self.concurrency

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "num_prompts": self.prompts}


def validate(settings: BenchSettings, inv: Inventory) -> BenchSettings:
    """Refuse settings the deployment cannot serve, before anything runs (exit 2)."""
    for name in ("input_len", "output_len", "concurrency"):
        if getattr(settings, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    if settings.num_prompts is not None and settings.num_prompts < 1:
        raise InputError("--num-prompts must be at least 1")
    total = settings.input_len + settings.output_len
    if total > inv.serving.max_model_len:
        raise InputError(f"--input-len {settings.input_len} + --output-len "
                         f"{settings.output_len} = {total} tokens exceeds "
                         f"serving.max_model_len {inv.serving.max_model_len}",
                         file=str(inv.path), field="serving.max_model_len")
    return settings


def bench_executable(inv: Inventory) -> str:
    """The `vllm` next to the serving engine when that is a path (the engine's venv),
    else `vllm` from the node's PATH."""
    engine = inv.serving.engine
    if "/" in engine:
        return posixpath.join(posixpath.dirname(engine), "vllm")
    return "vllm"


def npus_serving(inv: Inventory) -> int:
    """The devices the model runs on: tensor × pipeline × data parallel ranks."""
    s = inv.serving
    return s.tensor_parallel_size * s.pipeline_parallel_size * s.data_parallel_size


def served_model(inv: Inventory, release_dir: str) -> str:
    """The name requests use: --served-model-name, else the path `vllm serve` was given."""
    return inv.model.served_name or posixpath.join(release_dir, "model")


def bench_argv(inv: Inventory, settings: BenchSettings, *, executable: str,
               release_dir: str) -> list[str]:
    """`vllm bench serve` against the head's own API (run on the head). The result file
    options and the API key (environment) are added on the node."""
    argv = [
        executable, "bench", "serve",
        "--backend", "openai",
        "--base-url", http_url("127.0.0.1", entry_port(inv)),
        "--endpoint", "/v1/completions",
        "--model", served_model(inv, release_dir),
        "--tokenizer", posixpath.join(release_dir, "model"),
        "--dataset-name", "random",
        "--random-input-len", str(settings.input_len),
        "--random-output-len", str(settings.output_len),
        "--num-prompts", str(settings.prompts),
        "--max-concurrency", str(settings.concurrency),
        "--request-rate", "inf" if settings.request_rate is None else
        format(settings.request_rate, "g"),
        "--seed", str(settings.seed),
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", PERCENTILES,
        "--disable-tqdm",
    ]
    if inv.model.trust_remote_code:
        argv.append("--trust-remote-code")
    return argv
