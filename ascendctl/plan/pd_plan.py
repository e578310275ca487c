"""`ascendctl plan` for a PD inventory: each side of a serving group planned as the
deployment it is (its nodes, its layout, its own serving values).

The decode side holds every running request's KV for its whole length: it is judged by the
planner's own rule, max_num_seqs sequences of max_model_len per DP rank. The prefill side
holds a request's KV only until the decode side has pulled it: it is judged by one step of
max_num_batched_tokens (Workload.kv_demand), and its capacity is that step times its DP
ranks. Every serving group has the same layout, so the first one is planned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ascendctl.inventory import Inventory
from ascendctl.inventory.pd import ROLES, role_view
from ascendctl.plan.flags import engine_flags, launch_flags
from ascendctl.plan.inventory_plan import plan_inventory, resolve_model_config
from ascendctl.plan.memory import DEFAULT_BATCHED_TOKENS
from ascendctl.plan.modelcfg import ModelConfig
from ascendctl.plan.planner import KvDemand, Plan, refusal_message
from ascendctl.releases.scope import pinned_release, tutorial_for

KV_DEMAND: dict[str, KvDemand] = {"prefill": "max_num_batched_tokens",
                                  "decode": "max_num_seqs"}


@dataclass
class SidePlan:
    role: str
    hosts: tuple[str, ...]
    plan: Plan
    flags: list[str]

    @property
    def fits(self) -> bool:
        return self.plan.requested.fits

    def sizing(self) -> dict[str, Any]:
        req, work = self.plan.requested, self.plan.workload
        dp = req.layout.dp
        if self.role == "prefill":
            return {"sized_by": "max_num_batched_tokens",
                    "max_num_batched_tokens_per_dp_rank": work.max_num_batched_tokens,
                    "data_parallel_size": dp,
                    "tokens_per_step": work.max_num_batched_tokens * dp,
                    "kv_tokens_per_dp_rank": req.max_seqs_per_replica * work.max_model_len}
        return {"sized_by": "kv_concurrency",
                "max_num_seqs_per_dp_rank": work.max_num_seqs,
                "data_parallel_size": dp,
                "max_sequences_per_dp_rank": req.max_seqs_per_replica,
                "max_sequences_total": req.max_seqs_total}

    def describe(self) -> str:
        size = self.sizing()
        if self.role == "prefill":
            return (f"prefill sizing: {size['max_num_batched_tokens_per_dp_rank']} tokens per "
                    f"step (max_num_batched_tokens) x {size['data_parallel_size']} DP ranks = "
                    f"{size['tokens_per_step']} prompt tokens per step; KV per DP rank holds "
                    f"{size['kv_tokens_per_dp_rank']} tokens")
        return (f"decode sizing: KV holds {size['max_sequences_per_dp_rank']} sequences of "
                f"{self.plan.workload.max_model_len} tokens per DP rank (max_num_seqs "
                f"{size['max_num_seqs_per_dp_rank']}) x {size['data_parallel_size']} DP ranks "
                f"= {size['max_sequences_total']} concurrent sequences")

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "hosts": list(self.hosts), "fits": self.fits,
                "sizing": self.sizing(), "flags": self.flags, "plan": self.plan.as_dict()}


def plan_pd(inv: Inventory, *, model_config: ModelConfig | None = None,
            model_config_path: str | os.PathLike[str] | None = None) -> list[SidePlan]:
    """The prefill and decode sides of the first serving group, each planned."""
    cfg = model_config or resolve_model_config(inv, model_config_path)
    unit = inv.serving_groups[0].name
    sides = []
    for role in ROLES:
        view = role_view(inv, unit, role)
        plan = plan_inventory(view, model_config=cfg, kv_demand=KV_DEMAND[role])
        layout = plan.requested.layout
        flags = launch_flags(layout) + engine_flags(
            view.serving, view.model, layout, checkpoint_dtype=cfg.torch_dtype,
            tutorial=tutorial_for(pinned_release(view), view.model))
        sides.append(SidePlan(role, tuple(view.host_names), plan, flags))
    return sides


def refusal(sides: list[SidePlan]) -> str:
    return "; ".join(f"{side.role}: {refusal_message(side.plan)}" for side in sides
                     if not side.fits)


def print_pd_plan(sides: list[SidePlan], console: Any) -> None:
    from ascendctl.plan.report import print_plan

    for side in sides:
        console.print(f"== {side.role} ({', '.join(side.hosts)}): "
                      f"{'fits' if side.fits else 'DOES NOT FIT'} ==", markup=False)
        print_plan(side.plan, console)
        console.print(side.describe(), markup=False)
    console.print(f"(max_num_batched_tokens defaults to {DEFAULT_BATCHED_TOKENS} where a side "
                  "leaves it out)", markup=False)
