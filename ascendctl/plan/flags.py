"""The `vllm serve` flags implied by the inventory (and a layout): one source for the
planner's printout and the rendered engine command lines. Where the pinned vllm-ascend
release has a tutorial for the model, its flags are added (release_sets.yaml,
`tutorials:`), so the command equals the tutorial's."""

from __future__ import annotations

import json
from typing import Any

from ascendctl.releases.sets import TutorialFlags
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


def _flag_name(token: str) -> str:
    """`--no-async-scheduling`, `--async_scheduling=x` -> `async-scheduling`."""
    name = token.split("=", 1)[0].lstrip("-").replace("_", "-")
    return name[3:] if name.startswith("no-") else name


def _tutorial_args(tutorial: TutorialFlags, extra_args: list[str]) -> list[str]:
    """The tutorial's flags the inventory's extra_args does not set itself (in either
    form: `--seed 7` replaces the tutorial's `--seed 1024`, `--no-async-scheduling`
    drops `--async-scheduling`)."""
    given = {_flag_name(t) for t in extra_args if t.startswith("--")}
    out: list[str] = []
    args = list(tutorial.args)
    for i, token in enumerate(args):
        if not token.startswith("--"):
            continue
        value = [args[i + 1]] if i + 1 < len(args) and not args[i + 1].startswith("--") else []
        if _flag_name(token) not in given:
            out += [token, *value]
    return out


def engine_flags(serving: ServingSpec, model: ModelSpec, layout: Layout, *,
                 checkpoint_dtype: str | None,
                 tutorial: TutorialFlags | None = None) -> list[str]:
    """Flags shared by every rank, after the launch-mode flags, in the recipe's order.

    `--dtype` is passed only when it changes what the engine would pick from the
    checkpoint (`checkpoint_dtype`, None when unknown: then it is always passed).
    `tutorial`: what the pinned release's tutorial for this model adds
    (ascendctl.releases.scope.tutorial_for); the inventory's own values win: its
    speculative_config keys over the tutorial's, its extra_args over the tutorial's flags."""
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
        speculative = dict(serving.speculative_config)
        for key, value in (tutorial.speculative_config if tutorial else {}).items():
            speculative.setdefault(key, value)
        flags += ["--speculative-config", json_arg(speculative)]
    if serving.compilation_config:
        flags += ["--compilation-config", json_arg(serving.compilation_config)]
    if serving.additional_config:
        flags += ["--additional-config", json_arg(serving.additional_config)]
    if tutorial is not None:
        flags += _tutorial_args(tutorial, list(serving.extra_args))
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
