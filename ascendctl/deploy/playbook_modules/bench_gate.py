"""bench_gate: with `deploy.rolling.bench: true`, a short `vllm bench serve` against each
restarted serving group's head after its quality gate, judged by the inventory's `slo`;
a miss fails the step (the rollout's rescue puts the group back on its previous release).

Short: one round of requests at the bench's default concurrency (at most
serving.max_num_seqs), prompts and answers cut to fit serving.max_model_len. The figures
are stored on the head like any `ascendctl bench` run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendctl.deploy.handoffs import ENGINES_READY
from ascendctl.benchmark.run import run_bench
from ascendctl.benchmark.settings import (
    DEFAULT_CONCURRENCY, DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, BenchSettings,
)
from ascendctl.deploy.playbook_modules.common import DeployStep, gate_restarted_heads
from ascendctl.deploy.run import DeployRun
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import (
    ModuleContext, ModuleError, ModuleResult, register_module,
)

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory

BENCH_GATE_TIMEOUT_S = 900.0
OFF = "deploy.rolling.bench is off: no bench gate (docs/replicas.md)"


def gate_settings(inv: "Inventory") -> "BenchSettings":
    """One round of requests that fits the deployment."""
    s = inv.serving
    concurrency = max(1, min(DEFAULT_CONCURRENCY, s.max_num_seqs))
    return BenchSettings(input_len=max(1, min(DEFAULT_INPUT_LEN, s.max_model_len // 2)),
                         output_len=max(1, min(DEFAULT_OUTPUT_LEN, s.max_model_len // 4)),
                         concurrency=concurrency, num_prompts=concurrency,
                         timeout_s=BENCH_GATE_TIMEOUT_S)


@register_module("bench_gate")
class BenchGate(DeployStep):
    """A short bench against the SLOs on each restarted group's head (deploy.rolling.bench)."""

    needs = (ENGINES_READY,)

    runs_on = "controller"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        inv = ctx.inventory
        if not inv.deploy.rolling.bench:
            return ModuleResult(msg=OFF)
        settings = gate_settings(inv)

        def bench(group: str, head: "Host") -> str:
            try:
                report = run_bench(inv.group_view(group), settings,
                                   ctx.connection_for(head.name), run.log.sayer(head.name))
            except AscendctlError as err:
                raise ModuleError(f"bench gate could not run on {head.name}: {err}") from None
            summary = report.verdict.summary()
            if not report.verdict.passed:
                raise ModuleError(f"bench gate failed on {head.name}: {summary} "
                                  f"(stored: {report.stored})")
            return summary

        return gate_restarted_heads(
            ctx, run, bench, nothing_restarted="nothing was restarted: no bench gate",
            would=lambda heads: f"would bench {heads} ({settings.prompts} prompts, "
                                f"{settings.input_len} in / {settings.output_len} out) "
                                "against slo")
