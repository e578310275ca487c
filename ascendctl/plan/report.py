"""Human-readable plan tables (Rich); `--json` uses Plan.as_dict instead."""

from __future__ import annotations

from ascendctl.plan.memory import GIB
from ascendctl.plan.planner import LayoutPlan, Plan, rank_key


def _gib(value: float) -> str:
    return f"{value / GIB:.1f}"


def layout_table(title: str, plan: LayoutPlan):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("per NPU (GiB)")
    for stage in plan.stages:
        name = f"stage {stage.stage} [{stage.layers[0]}, {stage.layers[1]})" \
            if plan.layout.pp > 1 else "value"
        table.add_column(name, justify="right")
    parts = sorted({p for s in plan.stages for p in s.weights})
    rows: list[tuple[str, list[str]]] = []
    for part in parts:
        rows.append((f"  weights: {part}", [_gib(s.weights.get(part, 0)) for s in plan.stages]))
    rows += [
        ("weights", [_gib(s.weight_bytes) for s in plan.stages]),
        ("activations (workspace)", [_gib(s.activation) for s in plan.stages]),
        ("HCCL buffers", [_gib(s.hccl) for s in plan.stages]),
        ("runtime reserve", [_gib(s.runtime) for s in plan.stages]),
        ("budget (HBM total x gpu-memory-utilization)", [_gib(s.budget) for s in plan.stages]),
        ("KV budget", [_gib(s.kv_budget) for s in plan.stages]),
        ("KV + state per sequence", [f"{s.sequence['total'] / GIB:.3f}" for s in plan.stages]),
        (f"max sequences at {plan.workload.max_model_len} tokens",
         [str(s.max_seqs) for s in plan.stages]),
    ]
    for label, values in rows:
        table.add_row(label, *values)
    return table


def pages_line(plan: LayoutPlan) -> str:
    seq = plan.stages[0].sequence if plan.stages else None
    if seq is None:
        return "KV cache: no stages"
    text = (f"KV cache per NPU: blocks of {seq['block_size']} tokens, page "
            f"{seq['page_bytes']:,} B")
    if seq["ssm_state_bytes"]:
        text += (f" (attention {seq['attention_page_bytes']:,} B; state: SSM "
                 f"{seq['ssm_state_bytes']:,} B + conv {seq['conv_state_bytes']:,} B)")
    return (text + f", {seq['kv_groups']} group(s) of {seq['group_size']} layers, "
            f"{seq['blocks_per_sequence']} blocks per sequence")


def print_plan(plan: Plan, console) -> None:
    from rich.table import Table

    work = plan.workload
    console.print(f"model: {plan.model.name} ({plan.model.describe()}; "
                  f"{plan.params / 1e9:.1f}B parameters with MTP) as {work.quantization}"
                  f"/{work.dtype}")
    console.print(f"hardware: {work.chip}, {work.npus_per_node} NPUs per node; "
                  f"gpu-memory-utilization {work.gpu_memory_utilization}, max_model_len "
                  f"{work.max_model_len}, max_num_seqs {work.max_num_seqs}", markup=False)
    console.print(f"HBM total: {work.hbm.describe()}", markup=False)
    console.print(f"KV cache rule: {work.page_rule.describe()}", markup=False)
    req = plan.requested
    verdict = "fits" if req.fits else "DOES NOT FIT"
    console.print(layout_table(f"requested: {req.layout.describe()} - {verdict}", req))
    console.print(pages_line(req), markup=False)
    console.print(f"max concurrent sequences at {work.max_model_len} tokens: "
                  f"{req.max_seqs_per_replica} per replica x {req.layout.dp} replica(s) = "
                  f"{req.max_seqs_total}")
    for problem in req.problems:
        console.print(f"problem: {problem}")
    for warning in req.warnings:
        console.print(f"warning: {warning}")

    table = Table(title="layouts on these nodes (best first)", title_justify="left")
    for col in ("layout", "fits", "weights/NPU", "KV budget/NPU", "max seqs (all replicas)"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    for cand in sorted(plan.candidates, key=rank_key, reverse=True):
        table.add_row(cand.layout.describe(), "yes" if cand.fits else "no",
                      _gib(cand.weights_per_npu), _gib(cand.kv_budget_per_npu),
                      str(cand.max_seqs_total))
    console.print(table)
    rec = plan.recommended
    if rec is not None:
        console.print(f"recommended: {rec.layout.describe()}")
    elif plan.scale_out is not None:
        console.print(f"no layout fits on {req.layout.nodes} node(s); the smallest cluster "
                      f"that fits: {plan.scale_out.layout.describe()}")
    else:
        console.print("no layout fits, even on more nodes")
