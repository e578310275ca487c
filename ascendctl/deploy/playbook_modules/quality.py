"""quality_baseline and quality_gate: the quality gate (ascendctl/quality/gate.py,
docs/quality.md) inside the rolling deploy.

* `quality_baseline` (before the first group switches): with `slo.quality.agree_with_previous`,
  every head that is about to switch and whose serving release left no passing gate
  record of the prompt set answers the prompts now, while it still serves that release
  (`run_quality_gate(..., baseline=True)`): the reference its group's new release is held
  against. Records are kept on each head, so each head records its own.
* `quality_gate` (after a group's readiness and commit, before it is back in the
  balancer): the gate against each restarted group's head; the group's previous release
  is what it agrees with (its record, else live from a group still serving it). A failed
  gate fails the step: the rollout's rescue puts the group back on its previous release.

Without `slo.quality` in the inventory there is no gate (the step says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.handoffs import ENGINES_READY, NODE_STATES
from ascendctl.deploy.playbook_modules.common import (
    DeployStep, gate_restarted_heads, live_previous_head, serves,
)
from ascendctl.deploy.run import DeployRun
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.quality.gate import (
    LiveReference, QualityGateError, has_recorded_answers, run_quality_gate,
)
from ascendctl.quality.report import failure_lines

if TYPE_CHECKING:
    from ascendctl.inventory import Host
    from ascendctl.inventory.quality import QualitySpec

NO_GATE = "no slo.quality in the inventory: no quality gate (docs/quality.md)"


def _run_and_gate(ctx: ModuleContext) -> tuple[DeployRun, Optional["QualitySpec"]]:
    """The run (refusing to go on after a failure) and the inventory's slo.quality."""
    run = DeployRun.of(ctx)
    run.require_no_failure(ctx)
    return run, ctx.inventory.slo.quality


@register_module("quality_baseline")
class QualityBaseline(DeployStep):
    """Record the serving release's answers on each head about to switch that has none
    (agreement mode), while it still serves."""

    needs = (NODE_STATES,)

    runs_on = "controller"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        inv = ctx.inventory
        spec = inv.slo.quality
        if spec is None:
            return ModuleResult(msg=NO_GATE)
        if not spec.agree_with_previous:
            return ModuleResult(msg="the gate checks expected answers: no reference needed")
        target = run.target().release_id
        done, notes = [], []
        for group, hosts in run.groups_of(run.hosts(ctx.play_hosts)).items():
            if run.already_serving(hosts):
                continue
            head = hosts[0]
            old = run.previous_of(group)
            if old is None or old == target:
                notes.append(f"{group}: no earlier release, nothing to agree with")
                continue
            if not serves(run, head, old):
                notes.append(f"{head.name} does not serve {old}: its gate compares live with "
                             "a group still serving it, or fails")
                continue
            conn = ctx.connection_for(head.name)
            say = run.log.sayer(head.name)

            try:
                if has_recorded_answers(inv, old, conn, node=head):
                    notes.append(f"{head.name}: {old} has recorded answers")
                    continue
                if ctx.check:
                    done.append(f"would record {old}'s answers on {head.name}")
                    continue
                report = run_quality_gate(inv, old, conn, node=head, baseline=True, say=say)
            except AscendctlError as err:
                notes.append(f"{head.name}: cannot record {old}'s answers ({err})")
                continue
            if report.passed:
                done.append(f"recorded {old}'s answers on {head.name} ({report.stored})")
            else:
                notes.append(f"{head.name}: {old} did not answer its prompts: "
                             f"{report.summary()}")
        if not done and not notes:
            return ModuleResult(msg="nothing restarts: no reference needed")
        return ModuleResult(changed=bool(done) and not ctx.check,
                            msg="; ".join(done + notes))


class _GateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # False (rollback): only a gate of expected answers runs; agreement with the release
    # being replaced is not asked of a release that passed its gate when it was deployed
    agreement: bool = True


@register_module("quality_gate")
class QualityGateStep(Module):
    """The quality gate on each restarted serving group's head, before it takes traffic
    again; a failed (or impossible) gate fails the step, naming the gate."""

    needs = (ENGINES_READY,)

    runs_on = "controller"
    Args = _GateArgs

    def run(self, ctx: ModuleContext, args: _GateArgs) -> ModuleResult:
        run, spec = _run_and_gate(ctx)
        if spec is None:
            return ModuleResult(msg=NO_GATE)
        inv = ctx.inventory
        if spec.agree_with_previous and not args.agreement:
            return ModuleResult(msg="agreement with the release it replaces is not asked of "
                                "a release that passed its gate before")

        def gate(group: str, head: "Host") -> str:
            target = run.target().release_id
            previous = run.previous_of(group)
            say = run.log.sayer(head.name)
            try:
                report = run_quality_gate(
                    inv, target, ctx.connection_for(head.name), node=head,
                    previous_release=previous if previous != target else None,
                    live_reference=self._live(ctx, run, group, previous), say=say)
            except QualityGateError as err:
                raise ModuleError(f"quality gate ({spec.mode}) could not run on {head.name}: "
                                  f"{err}") from None
            if not report.passed:
                for line in failure_lines(report):
                    say(line)
                raise ModuleError(f"{report.summary()} (record: {report.stored})")
            return report.summary()

        return gate_restarted_heads(
            ctx, run, gate, nothing_restarted="nothing was restarted: the serving release "
                                              "passed its gate when it was deployed",
            would=lambda heads: f"would gate {run.target().release_id} on {heads} "
                                f"({spec.mode})")

    @staticmethod
    def _live(ctx: ModuleContext, run: DeployRun, group: str,
              previous: Optional[str]) -> Optional["LiveReference"]:
        """A head of another group that still serves PREVIOUS (not switched yet)."""
        found = live_previous_head(ctx, run, group, previous)
        return None if found is None or previous is None else \
            LiveReference(found, ctx.connection_for(found.name), previous)
