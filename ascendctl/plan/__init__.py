"""Capacity planner: weight bytes, KV budget and concurrency per NPU for a parallel layout.

Pure functions: nothing here touches a host. Entry points:
`plan_inventory(inv)` (never raises on a misfit), `check_inventory(inv)` (raises
PlanRefused with the numbers), `make_plan(model_config, layout, workload)`.
"""

from ascendctl.plan.builtin import builtin_config, builtin_names
from ascendctl.plan.inventory_plan import (
    check_inventory, plan_inventory, requested_layout, resolve_model_config, workload,
)
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import ModelConfig, load_model_config, parse_model_config
from ascendctl.plan.planner import (
    LayoutPlan, Plan, PlanRefused, Workload, make_plan, plan_layout, refusal_message,
)
from ascendctl.plan.pp_split import get_pp_indices, layer_counts, stage_ranges

__all__ = [
    "Layout", "LayoutPlan", "ModelConfig", "Plan", "PlanRefused", "Workload",
    "builtin_config", "builtin_names", "check_inventory", "get_pp_indices", "layer_counts",
    "load_model_config", "make_plan", "parse_model_config", "plan_inventory", "plan_layout",
    "refusal_message", "requested_layout", "resolve_model_config", "stage_ranges", "workload",
]
