"""promotion_gate: the promotion gates of slo.promotion (ascendctl/gates/, docs/promotion.md)
on each restarted serving group's head, after its quality and bench gates and before it
is back in the balancer. A gate that fails (or cannot measure) fails the step, naming the
gate and its figures; the rollout's rescue puts the group back on its previous release.
The evidence stays on the head beside the release either way.

Side by side: a head of another group that still serves the release being replaced is
measured in the same run (the regression's paired rounds; the long tail when the
previous release has no stored tail). A measured envelope is what the gateway admits
from then on (balancer.apply_site).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.handoffs import ENGINES_READY
from ascendctl.deploy.playbook_modules.common import gate_restarted_heads, live_previous_head
from ascendctl.deploy.run import DeployRun
from ascendctl.gates.context import GateContext
from ascendctl.gates.head import GateError, GateHead
from ascendctl.gates.runner import run_gates
from ascendctl.playbook.modules import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)

if TYPE_CHECKING:
    from ascendctl.inventory import Host

NO_GATES = "no slo.promotion in the inventory: no promotion gates (docs/promotion.md)"


class _PromotionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # False (rollback): a release going back into service passed its gates when it was
    # deployed; it is not measured again
    promote: bool = True


@register_module("promotion_gate")
class PromotionGate(Module):
    """slo.promotion's gates on each restarted group's head (regression, long tail,
    envelope, soak): the first that fails fails the step."""

    needs = (ENGINES_READY,)

    runs_on = "controller"
    Args = _PromotionArgs

    def run(self, ctx: ModuleContext, args: _PromotionArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        run.require_no_failure(ctx)
        inv = ctx.inventory
        spec = inv.slo.promotion
        if spec is None or not spec.gates:
            return ModuleResult(msg=NO_GATES)
        if not args.promote:
            return ModuleResult(msg="a release going back into service is not gated again")
        gates = ", ".join(spec.ordered_gates)

        def gate(group: str, head: "Host") -> str:
            release = run.target().release_id
            if release in run.promoted and not spec.every_group:
                return (f"promoted on {run.promoted[release]}'s evidence (the rollout's first "
                        "batch; slo.promotion.every_group: false)")
            previous = run.previous_of(group)
            previous = previous if previous != release else None
            view = inv.group_view(group)
            live_host = live_previous_head(ctx, run, group, previous)
            live = None if live_host is None or previous is None else GateHead(
                inv.group_view(live_host.serving_group), live_host,
                ctx.connection_for(live_host.name), previous)
            followers = [GateHead(view, host, ctx.connection_for(host.name), release)
                         for host in view.hosts if host.name != head.name]
            context = GateContext(inv=view, spec=spec, group=group,
                                  candidate=GateHead(view, head, ctx.connection_for(head.name),
                                                     release),
                                  previous=previous, live=live, followers=followers,
                                  say=run.log.sayer(head.name))
            try:
                outcome = run_gates(context)
            except GateError as err:
                raise ModuleError(f"promotion gates could not run on {head.name}: {err}") \
                    from None
            if outcome.envelope is not None:
                run.envelopes[release] = outcome.envelope
            if not outcome.passed:
                raise ModuleError(outcome.summary())
            run.promoted.setdefault(release, group)
            return outcome.summary()

        return gate_restarted_heads(
            ctx, run, gate, nothing_restarted="nothing was restarted: the serving release "
                                              "passed its gates when it was deployed",
            would=lambda heads: f"would run the promotion gates ({gates}) on {heads}")
