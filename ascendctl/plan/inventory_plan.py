"""The planner's view of an inventory: model config, workload and the requested layout."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ascendctl.releases.scope import scope_warnings
from ascendctl.errors import InputError
from ascendctl.inventory import Inventory
from ascendctl.plan import memory as mem
from ascendctl.plan.builtin import builtin_config
from ascendctl.plan.hbm import usable_total
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import ModelConfig, load_model_config
from ascendctl.plan.pagerules import RuleChoice, rule_for
from ascendctl.plan.planner import (
    KvDemand, Plan, PlanRefused, Workload, make_plan, refusal_message,
)
from ascendctl.plan.pp_split import PARTITION_ENV

MTP_METHODS = ("mtp",)


def resolve_model_config(inv: Inventory, override: str | os.PathLike[str] | None = None
                         ) -> ModelConfig:
    """--model-config, then model.config, then <model.source>/config.json, then the builtin.

    Only a file that is not there falls through to the next: a FIFO, device or directory
    in its place is refused (by the reader), never silently replaced by the builtin."""
    if override is not None:
        return load_model_config(override)
    model = inv.model
    if model.config:
        path = Path(os.path.expanduser(model.config))
        if os.path.lexists(path):
            return load_model_config(path)
        if not model.builtin_config:
            raise InputError(f"model.config {model.config} does not exist on this machine",
                             file=str(inv.path), field="model.config")
    if model.source:
        candidate = Path(os.path.expanduser(model.source)) / "config.json"
        if os.path.lexists(candidate):
            return load_model_config(candidate)
    if model.builtin_config:
        return builtin_config(model.builtin_config)
    raise InputError("no model config at hand: set model.builtin_config, model.config, or "
                     "pass --model-config config.json", file=str(inv.path), field="model")


def engine_env_overrides(inv: Inventory) -> dict[str, str]:
    """serving.env then the head's env: what the engine sees for planner-relevant keys."""
    env = dict(inv.serving.env)
    env.update(inv.head.env)
    return env


def speculative(inv: Inventory) -> tuple[bool, int]:
    spec: dict[str, Any] = inv.serving.speculative_config or {}
    method = str(spec.get("method") or "")
    tokens = int(spec.get("num_speculative_tokens") or 0)
    return any(m in method for m in MTP_METHODS), tokens


def page_rule(inv: Inventory) -> RuleChoice:
    """The block/page rule of the target engine: `versions.vllm_ascend` picks vllm-ascend's
    rule of that release; without an NPU stack pinned, upstream vLLM's."""
    versions = inv.versions
    return rule_for(versions.vllm_ascend, npu_stack=versions.torch_npu is not None)


def workload(inv: Inventory) -> Workload:
    serving, cluster = inv.serving, inv.cluster
    env = engine_env_overrides(inv)
    try:
        buffsize = int(env.get("HCCL_BUFFSIZE", mem.HCCL_BUFFSIZE_MB_DEFAULT))
    except ValueError:
        raise InputError(f"HCCL_BUFFSIZE={env['HCCL_BUFFSIZE']!r} is not a number of MB",
                         file=str(inv.path), field="serving.env.HCCL_BUFFSIZE") from None
    mtp, num_spec = speculative(inv)
    return Workload(
        hbm=usable_total(cluster.chip, cluster.hbm_gib),
        gpu_memory_utilization=serving.gpu_memory_utilization,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens or mem.DEFAULT_BATCHED_TOKENS,
        dtype=inv.model.dtype,
        quantization=inv.model.quantization,
        mtp=mtp, num_speculative_tokens=num_spec,
        hccl_buffsize_mb=buffsize,
        pp_partition=env.get(PARTITION_ENV),
        watchdog_threshold=serving.hbm_watchdog_threshold,
        npus_per_node=cluster.npus_per_node,
        chip=cluster.chip,
        page_rule=page_rule(inv),
        prefix_caching=serving.enable_prefix_caching is True,
    )


def requested_layout(inv: Inventory) -> Layout:
    s = inv.serving
    return Layout(mode=s.mode, nodes=inv.group_size, tp=s.tensor_parallel_size,
                  pp=s.pipeline_parallel_size, dp=s.data_parallel_size,
                  dp_local=s.dp_local if s.mode == "dp" else 1,
                  expert_parallel=s.enable_expert_parallel)


def plan_inventory(inv: Inventory, *, model_config: ModelConfig | None = None,
                   model_config_path: str | os.PathLike[str] | None = None,
                   kv_demand: KvDemand = "max_num_seqs") -> Plan:
    """Plan the inventory's own layout, rank the alternatives, never raise on a misfit.
    `kv_demand`: what the KV cache must hold at once (Workload.kv_demand)."""
    cfg = model_config or resolve_model_config(inv, model_config_path)
    work = dataclasses.replace(workload(inv), kv_demand=kv_demand)
    plan = make_plan(cfg, requested_layout(inv), work)
    plan.requested.warnings.extend(scope_warnings(inv))
    return plan


def check_inventory(inv: Inventory, **kwargs: Any) -> Plan:
    """Like plan_inventory, but raise PlanRefused (exit 1) when the layout cannot fit."""
    plan = plan_inventory(inv, **kwargs)
    if not plan.requested.fits:
        raise PlanRefused(refusal_message(plan), plan)
    return plan
