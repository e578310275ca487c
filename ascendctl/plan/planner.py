"""The capacity planner: does a layout fit, with how much KV cache, and which layout is best."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit
from ascendctl.plan import memory as mem
from ascendctl.plan.hbm import HbmTotal
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import DTYPE_BYTES, ModelConfig
from ascendctl.plan.pagerules import UPSTREAM, RuleChoice
from ascendctl.plan.pp_split import PartitionError, stage_ranges
from ascendctl.plan.quant import WeightFormat, weight_format
from ascendctl.plan.weights import stage_weight_bytes, total_params


KvDemand = Literal["max_num_seqs", "max_num_batched_tokens"]


@dataclass(frozen=True)
class Workload:
    """What the engine is asked to do, and the hardware it runs on (per NPU)."""
    hbm: HbmTotal                # the total the engine budgets from, with its source
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    dtype: str
    quantization: str
    mtp: bool = False
    num_speculative_tokens: int = 0
    hccl_buffsize_mb: int = mem.HCCL_BUFFSIZE_MB_DEFAULT
    pp_partition: str | None = None
    watchdog_threshold: float | None = None
    npus_per_node: int = 8
    chip: str = ""
    page_rule: RuleChoice = RuleChoice(UPSTREAM, "vllm", None, True)
    prefix_caching: bool = False     # serving.enable_prefix_caching: true
    # what the KV cache must hold at once: max_num_seqs whole sequences (a serving or decode
    # engine), or one step of max_num_batched_tokens (a PD prefill engine, whose KV leaves
    # for the decode side once computed)
    kv_demand: KvDemand = "max_num_seqs"

    @property
    def hbm_bytes(self) -> int:
        return self.hbm.total_bytes

    @property
    def sequences_needed(self) -> int:
        """Whole sequences of max_model_len the KV cache must hold (kv_demand)."""
        if self.kv_demand == "max_num_batched_tokens":
            return -(-self.max_num_batched_tokens // self.max_model_len)
        return self.max_num_seqs

    @property
    def budget_bytes(self) -> int:
        """vllm-ascend's requested_memory: mem_get_info's total x gpu_memory_utilization."""
        return int(self.hbm.total_bytes * self.gpu_memory_utilization)


@dataclass
class StagePlan:
    stage: int
    layers: tuple[int, int]
    weights: dict[str, float]
    activation: int
    hccl: int
    runtime: int
    budget: int
    sequence: dict[str, int]

    @property
    def weight_bytes(self) -> float:
        return sum(self.weights.values())

    @property
    def fixed_bytes(self) -> float:
        return self.weight_bytes + self.activation + self.hccl + self.runtime

    @property
    def kv_budget(self) -> float:
        return self.budget - self.fixed_bytes

    @property
    def max_seqs(self) -> int:
        """vLLM's count: whole blocks of `page x group size` bytes, then whole requests
        (kvcache.Allocation.max_requests)."""
        if self.kv_budget <= 0 or self.sequence["total"] <= 0:
            return 0 if self.kv_budget <= 0 else 1 << 30
        block = self.sequence["page_bytes"] * self.sequence["group_size"]
        return int(self.kv_budget // block) // self.sequence["blocks_per_sequence"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage, "layers": list(self.layers),
            "weights_bytes": round(self.weight_bytes),
            "weights_by_part_bytes": {k: round(v) for k, v in sorted(self.weights.items())},
            "activation_bytes": self.activation, "hccl_bytes": self.hccl,
            "runtime_reserve_bytes": self.runtime, "budget_bytes": self.budget,
            "kv_budget_bytes": round(self.kv_budget),
            "kv_bytes_per_token": self.sequence["kv_per_token"],
            "state_bytes_per_sequence": self.sequence["state"],
            "bytes_per_sequence": self.sequence["total"],
            "kv_block_size": self.sequence["block_size"],
            "kv_page_bytes": self.sequence["page_bytes"],
            "kv_attention_page_bytes": self.sequence["attention_page_bytes"],
            "conv_state_bytes": self.sequence["conv_state_bytes"],
            "ssm_state_bytes": self.sequence["ssm_state_bytes"],
            "kv_groups": self.sequence["kv_groups"],
            "kv_blocks_per_sequence": self.sequence["blocks_per_sequence"],
            "max_sequences": self.max_seqs,
        }


@dataclass
class LayoutPlan:
    layout: Layout
    stages: list[StagePlan]
    workload: Workload
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def weights_per_npu(self) -> float:
        return max((s.weight_bytes for s in self.stages), default=0.0)

    @property
    def kv_budget_per_npu(self) -> float:
        return min((s.kv_budget for s in self.stages), default=0.0)

    @property
    def max_seqs_per_replica(self) -> int:
        return min((s.max_seqs for s in self.stages), default=0)

    @property
    def max_seqs_total(self) -> int:
        return self.max_seqs_per_replica * self.layout.dp

    def as_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.as_dict(), "fits": self.fits,
            "weights_per_npu_bytes": round(self.weights_per_npu),
            "kv_budget_per_npu_bytes": round(self.kv_budget_per_npu),
            "max_sequences_per_replica": self.max_seqs_per_replica,
            "max_sequences_total": self.max_seqs_total,
            "max_model_len": self.workload.max_model_len,
            "stages": [s.as_dict() for s in self.stages],
            "problems": list(self.problems), "warnings": list(self.warnings),
        }


class PlanRefused(AscendctlError):
    """The inventory's layout cannot fit; carries the plan with the numbers."""

    exit_code = Exit.FAILED

    def __init__(self, message: str, plan: Any):
        super().__init__(message)
        self.plan = plan


def gib(value: float) -> str:
    return f"{value / mem.GIB:.1f} GiB"


def layout_errors(cfg: ModelConfig, layout: Layout) -> list[str]:
    """Layouts vLLM itself rejects (divisibility of heads over TP, stages over layers)."""
    errors = []
    tp = layout.tp
    if cfg.num_heads % tp:
        errors.append(f"{cfg.num_heads} attention heads are not divisible by TP {tp}")
    kv = cfg.num_kv_heads
    if cfg.mla is None and kv % tp and tp % kv:
        errors.append(f"{kv} KV heads and TP {tp}: one must divide the other")
    if cfg.linear is not None:
        la = cfg.linear
        if la.num_value_heads % tp or la.num_key_heads % tp:
            errors.append(f"linear-attention heads ({la.num_key_heads} K / "
                          f"{la.num_value_heads} V) are not divisible by TP {tp}")
    if layout.pp > cfg.num_layers:
        errors.append(f"PP {layout.pp} is more than the {cfg.num_layers} layers")
    return errors


def plan_layout(cfg: ModelConfig, layout: Layout, work: Workload) -> LayoutPlan:
    fmt: WeightFormat = weight_format(work.quantization, work.dtype, cfg.torch_dtype)
    act_bytes = fmt.dtype_bytes
    problems = layout_errors(cfg, layout)
    warnings: list[str] = []
    try:
        ranges = stage_ranges(cfg.num_layers, layout.pp, work.pp_partition)
    except PartitionError as err:
        problems.append(str(err))
        ranges = stage_ranges(cfg.num_layers, layout.pp)
    mtp = work.mtp and cfg.mtp_layers > 0
    num_spec = work.num_speculative_tokens if work.mtp else 0
    hccl = len(mem.hccl_communicators(layout)) * 2 * work.hccl_buffsize_mb * mem.MIB
    budget = work.budget_bytes
    stages = []
    for stage, layers in enumerate(ranges):
        last = stage == layout.pp - 1
        weights = stage_weight_bytes(cfg, layout, fmt, stage, layers, with_mtp=mtp)
        seq = mem.sequence_bytes(cfg, layout, layers, max_model_len=work.max_model_len,
                                 kv_bytes=act_bytes, dtype_bytes=act_bytes,
                                 num_spec=num_spec, mtp_layers=cfg.mtp_layers if mtp else 0,
                                 last_stage=last, rule=work.page_rule.rule)
        act = mem.activation_bytes(cfg, layout, layers,
                                   batched_tokens=work.max_num_batched_tokens,
                                   max_num_seqs=work.max_num_seqs, act_bytes=act_bytes,
                                   last_stage=last, num_spec=num_spec)
        stages.append(StagePlan(stage, layers, weights, act, hccl, mem.RUNTIME_RESERVE_BYTES,
                                budget, seq))
    plan = LayoutPlan(layout, stages, work, problems, warnings)
    _judge(plan, cfg)
    return plan


def _judge(plan: LayoutPlan, cfg: ModelConfig) -> None:
    work, layout = plan.workload, plan.layout
    free = work.hbm_bytes - mem.IDLE_USED_BYTES
    budget = work.budget_bytes
    if budget > free:
        plan.problems.append(
            f"gpu_memory_utilization {work.gpu_memory_utilization} asks for {gib(budget)} of "
            f"the {gib(work.hbm_bytes)} total per NPU, but only about {gib(free)} is free on "
            f"an idle chip: vLLM refuses to start")
    _judge_pages(plan, cfg)
    if layout.npus_per_node_used > work.npus_per_node:
        plan.problems.append(f"the layout needs {layout.npus_per_node_used} NPUs per node; "
                             f"nodes have {work.npus_per_node}")
    if cfg.is_moe and layout.expert_parallel and cfg.num_experts % layout.ep_size:
        plan.warnings.append(f"{cfg.num_experts} experts do not split evenly over EP "
                             f"{layout.ep_size}: some NPUs hold one more expert")
    for stage in plan.stages:
        where = f"stage {stage.stage} (layers {stage.layers[0]}-{stage.layers[1] - 1})" \
            if layout.pp > 1 else "each NPU"
        if stage.kv_budget <= 0:
            plan.problems.append(
                f"{where}: weights {gib(stage.weight_bytes)} + activations "
                f"{gib(stage.activation)} + HCCL buffers {gib(stage.hccl)} + runtime "
                f"{gib(stage.runtime)} = {gib(stage.fixed_bytes)} exceed the "
                f"{gib(stage.budget)} budget ({gib(work.hbm_bytes)} total x "
                f"gpu_memory_utilization {work.gpu_memory_utilization}) by "
                f"{gib(-stage.kv_budget)}")
        elif stage.max_seqs < 1:
            plan.problems.append(
                f"{where}: KV budget {gib(stage.kv_budget)} cannot hold one sequence of "
                f"{work.max_model_len} tokens ({gib(stage.sequence['total'])}); vLLM "
                "refuses to start")
        elif stage.max_seqs < work.sequences_needed:
            demand = f"max_num_seqs {work.max_num_seqs}" \
                if work.kv_demand == "max_num_seqs" else \
                f"the {work.sequences_needed} that one step of max_num_batched_tokens " \
                f"{work.max_num_batched_tokens} fills"
            plan.problems.append(
                f"{where}: KV budget {gib(stage.kv_budget)} holds {stage.max_seqs} sequence{'s' if stage.max_seqs != 1 else ''} "
                f"of {work.max_model_len} tokens ({gib(stage.sequence['total'])} each), fewer "
                f"than {demand}")
    if cfg.max_position_embeddings and work.max_model_len > cfg.max_position_embeddings:
        plan.warnings.append(f"max_model_len {work.max_model_len} exceeds the model's "
                             f"max_position_embeddings {cfg.max_position_embeddings}")
    if work.mtp and not cfg.mtp_layers:
        plan.warnings.append("speculative_config asks for MTP but the model config has no "
                             "MTP layers")
    if work.quantization == "fp8" and work.chip:
        plan.warnings.append(f"{work.chip} has no native FP8: fp8 weights are planned as "
                             "1 byte each, but vllm-ascend support is not verified")
    threshold = work.watchdog_threshold
    if threshold is not None:
        # npu-smi's used/total, which the watchdog reads: the budget, what the runtime holds
        # on an idle chip, and the HBM mem_get_info does not report
        hidden = work.hbm.nominal_bytes - work.hbm.total_bytes
        steady = (budget + mem.IDLE_USED_BYTES + hidden) / work.hbm.nominal_bytes
        if steady >= threshold:
            plan.warnings.append(
                f"a running engine holds about {steady:.0%} of HBM (budget + driver), at or "
                f"above hbm_watchdog_threshold {threshold:.0%}: the watchdog would restart a "
                "healthy engine")


def _judge_pages(plan: LayoutPlan, cfg: ModelConfig) -> None:
    """What the release's page rule refuses or cannot vouch for."""
    choice = plan.workload.page_rule
    stage = plan.stages[0] if plan.stages else None
    if stage is None or not stage.sequence["ssm_state_bytes"]:
        return
    target = " ".join(filter(None, (choice.engine, choice.release)))
    if not stage.sequence["pages_aligned"]:
        plan.problems.append(
            f"{target} asserts 'Cannot align ssm_page_size and attn_page_size.' at start-up: "
            f"the SSM state page ({stage.sequence['ssm_state_bytes']:,} B) is not one block "
            f"of {stage.sequence['block_size']} tokens of K per rank")
    if plan.workload.prefix_caching:
        plan.warnings.append(
            "enable_prefix_caching on a model with linear attention: vLLM switches "
            "mamba_cache_mode to 'align', which holds more state blocks per sequence than "
            "the plan counts")
    if cfg.mla is not None and choice.engine == "vllm-ascend" and not choice.rule.mla_branch:
        plan.warnings.append(
            f"MLA + linear attention under vllm-ascend {choice.release}: this release pads "
            "only non-MLA attention pages (the MLA branch came in v0.19.1rc1); the KV figures "
            "are unverified")


def candidate_layouts(cfg: ModelConfig, mode: str, nodes: int, npus_per_node: int
                      ) -> list[Layout]:
    """Every layout that uses all NPUs of `nodes` nodes in the given launch mode."""
    eps = (False, True) if cfg.is_moe else (False,)
    found: list[Layout] = []
    divisors = [d for d in range(1, npus_per_node + 1) if npus_per_node % d == 0]
    if mode == "dp":
        for dp_local in divisors:
            tp = npus_per_node // dp_local
            for ep in eps:
                found.append(Layout("dp", nodes, tp, 1, nodes * dp_local, dp_local, ep))
    else:
        world = nodes * npus_per_node
        for tp in range(1, world + 1):
            if world % tp:
                continue
            pp = world // tp
            if mode == "mp" and tp > npus_per_node and tp % npus_per_node:
                continue
            for ep in eps:
                found.append(Layout(mode, nodes, tp, pp, 1, 1, ep))
    return [lay for lay in found if not layout_errors(cfg, lay)
            and not (lay.expert_parallel and cfg.num_experts % lay.ep_size)]


def rank_key(plan: LayoutPlan) -> tuple:
    """Most KV headroom per NPU first, then most concurrent sequences, then smaller TP."""
    return (plan.fits, round(plan.kv_budget_per_npu / mem.MIB), plan.max_seqs_total,
            -plan.layout.tp)


@dataclass
class Plan:
    model: ModelConfig
    workload: Workload
    requested: LayoutPlan
    candidates: list[LayoutPlan]
    scale_out: LayoutPlan | None = None
    params: int = 0

    @property
    def recommended(self) -> LayoutPlan | None:
        fitting = [c for c in self.candidates if c.fits]
        return max(fitting, key=rank_key) if fitting else None

    def as_dict(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "model": {"name": self.model.name, "source": self.model.source,
                      "description": self.model.describe(), "parameters": self.params,
                      "dtype": self.workload.dtype, "quantization": self.workload.quantization},
            "hardware": {"chip": self.workload.chip,
                         "hbm_per_npu_bytes": self.workload.hbm.nominal_bytes,
                         "hbm_total_bytes": self.workload.hbm.total_bytes,
                         "hbm_total_source": self.workload.hbm.source,
                         "hbm_total_verified": self.workload.hbm.verified,
                         "budget_bytes": self.workload.budget_bytes,
                         "npus_per_node": self.workload.npus_per_node,
                         "gpu_memory_utilization": self.workload.gpu_memory_utilization},
            "kv_cache_rule": self.workload.page_rule.as_dict(),
            "requested": self.requested.as_dict(),
            "recommended": rec.as_dict() if rec else None,
            "candidates": [c.as_dict() for c in sorted(self.candidates, key=rank_key,
                                                       reverse=True)],
            "scale_out": self.scale_out.as_dict() if self.scale_out else None,
        }


def make_plan(cfg: ModelConfig, requested: Layout, work: Workload, *,
              max_nodes: int | None = None) -> Plan:
    req = plan_layout(cfg, requested, work)
    candidates = [plan_layout(cfg, lay, work)
                  for lay in candidate_layouts(cfg, requested.mode, requested.nodes,
                                               work.npus_per_node)]
    plan = Plan(cfg, work, req, candidates, params=total_params(cfg))
    if not req.fits and plan.recommended is None:
        limit = max_nodes or max(16, requested.nodes * 4)
        for nodes in range(requested.nodes + 1, limit + 1):
            options = [plan_layout(cfg, lay, work)
                       for lay in candidate_layouts(cfg, requested.mode, nodes,
                                                    work.npus_per_node)]
            fitting = [o for o in options if o.fits]
            if fitting:
                plan.scale_out = max(fitting, key=rank_key)
                break
    return plan


def refusal_message(plan: Plan) -> str:
    req = plan.requested
    text = f"{req.layout.describe()} does not fit {plan.model.name}: " + "; ".join(req.problems)
    rec = plan.recommended
    if rec is not None:
        text += f". A layout that fits on these nodes: {rec.layout.describe()}"
    elif plan.scale_out is not None:
        text += (f". Needs {plan.scale_out.layout.nodes} nodes: "
                 f"{plan.scale_out.layout.describe()} fits")
    return text



__all__ = ["DTYPE_BYTES", "LayoutPlan", "Plan", "PlanRefused", "StagePlan", "Workload",
           "candidate_layouts", "make_plan", "plan_layout", "refusal_message"]
