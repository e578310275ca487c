"""The `vllm serve` flags implied by the inventory (and a layout): one source for the
planner's printout and the rendered engine command lines."""

from __future__ import annotations

import json
from typing import Any

from ascendctl.inventory.model import ModelSpec, ServingSpec
from ascendctl.plan.layout import Layout
from ascendctl.plan.quant import ENGINE_QUANTIZATION


def json_arg(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=True)


def number(value: float) -> str:
    return format(value, "g")


def parallel_flags(layout: Layout) -> list[str]:
    flags = ["--tensor-parallel-size", str(layout.tp)]
    if layout.pp > 1:
        flags += ["--pipeline-parallel-size", str(layout.pp)]
    if layout.expert_parallel:
        flags.append("--enable-expert-parallel")
    return flags


# Checked against the vllm-ascend tutorial "Qwen3.5-397B-A17B", section "Multi-node
# Deployment with MP" (docs/source/tutorials/models/Qwen3.5-397B-A17B.md, as published for
# releases-v0.22.1rc and main; the model needs >= v0.17.0rc1): both nodes also pass
# `--seed 1024` and `--async-scheduling`, and the speculative config carries
# `"enforce_eager": true` ({"method": "qwen3_5_mtp", "num_speculative_tokens": 3,
# "enforce_eager": true}); the A2 multi-node example omits --quantization ascend, the A3
# single-node one passes it. None of these is a default here: add them with
# serving.extra_args / serving.speculative_config (the reference inventory keeps FACTS.md's
# recipe verbatim, which the acceptance test compares flag by flag).
def engine_flags(serving: ServingSpec, model: ModelSpec, layout: Layout, *,
                 checkpoint_dtype: str | None) -> list[str]:
    """Flags shared by every rank, after the launch-mode flags, in the recipe's order.

    `--dtype` is passed only when it changes what the engine would pick from the
    checkpoint (`checkpoint_dtype`, None when unknown: then it is always passed)."""
    flags = parallel_flags(layout)
    flags += ["--max-num-seqs", str(serving.max_num_seqs),
              "--max-model-len", str(serving.max_model_len)]
    if serving.max_num_batched_tokens:
        flags += ["--max-num-batched-tokens", str(serving.max_num_batched_tokens)]
    flags += ["--gpu-memory-utilization", number(serving.gpu_memory_utilization)]
    if serving.enable_prefix_caching is True:
        flags.append("--enable-prefix-caching")
    elif serving.enable_prefix_caching is False:
        flags.append("--no-enable-prefix-caching")
    if serving.enforce_eager:
        flags.append("--enforce-eager")
    if model.quantization in ENGINE_QUANTIZATION:
        flags += ["--quantization", ENGINE_QUANTIZATION[model.quantization]]
    if model.trust_remote_code:
        flags.append("--trust-remote-code")
    if model.dtype != "auto" and model.dtype != checkpoint_dtype:
        flags += ["--dtype", model.dtype]
    if model.served_name:
        flags += ["--served-model-name", model.served_name]
    if serving.speculative_config:
        flags += ["--speculative-config", json_arg(serving.speculative_config)]
    if serving.compilation_config:
        flags += ["--compilation-config", json_arg(serving.compilation_config)]
    if serving.additional_config:
        flags += ["--additional-config", json_arg(serving.additional_config)]
    return flags + list(serving.extra_args)


def launch_flags(layout: Layout) -> list[str]:
    """The launch-mode flags a layout adds on the head (addresses and ports omitted)."""
    if layout.mode == "dp":
        return ["--data-parallel-size", str(layout.dp),
                "--data-parallel-size-local", str(layout.dp_local)]
    if layout.mode == "ray":
        return ["--distributed-executor-backend", "ray"]
    if layout.nodes > 1:
        return ["--distributed-executor-backend", "mp", "--nnodes", str(layout.nodes)]
    return []
