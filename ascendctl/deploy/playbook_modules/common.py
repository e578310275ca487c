"""What the deploy step modules share: argument models, group results and the gates
after the switch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict

from ascendctl_runtime.layout import ENGINE_UNIT

from ascendctl.deploy.engines import EngineControl, StepFailed
from ascendctl.deploy.run import DeployRun
from ascendctl.playbook.modules import Module, ModuleContext, ModuleResult

if TYPE_CHECKING:
    from ascendctl.inventory import Host


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeployStep(Module):
    """A deploy step without arguments that acts on the cluster: it refuses to go on after
    a failure earlier in the run (the rescue decides then), else `act`s on the run."""

    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        run.require_no_failure(ctx)
        return self.act(ctx, run)

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:  # pragma: no cover
        raise NotImplementedError


def engine(ctx: ModuleContext, run: DeployRun, host: "Host", step: str) -> EngineControl:
    """The host's engine units, over its connection from this task (seen from its serving
    group: its head, its coordination port)."""
    return EngineControl(run.inv.view_of(host), host, ctx.connection_for(host.name),
                         step=step, cancel=ctx.cancel, become=ctx.become)


def group_result(names: Iterable[str], done: Mapping[str, ModuleResult],
                 failure: Optional[StepFailed], *, msg: str) -> ModuleResult:
    """One run_once step over a group: each host's own result; on a failure the failing
    host fails with the reason, hosts not reached yet are skipped."""
    per_host: dict[str, ModuleResult] = {}
    for name in names:
        if failure is not None and name == failure.node:
            per_host[name] = ModuleResult(failed=True, msg=failure.reason)
        elif name in done:
            per_host[name] = done[name]
        else:
            per_host[name] = ModuleResult(skipped=True, msg=f"not reached: the step failed "
                                          f"on {failure.node}" if failure else "")
    if failure is not None:
        if not any(r.failed for r in per_host.values()):
            for result in per_host.values():     # the failing node is not in the group
                result.failed, result.skipped, result.msg = True, False, str(failure)
        return ModuleResult(failed=True, msg=str(failure), per_host=per_host)
    changed = any(r.changed for r in per_host.values())
    return ModuleResult(changed=changed, msg=msg, per_host=per_host)


def gate_restarted_heads(ctx: ModuleContext, run: DeployRun,
                         gate: Callable[[str, "Host"], str], *, nothing_restarted: str,
                         would: Callable[[str], str]) -> ModuleResult:
    """A gate after the switch: `gate(group, head)` on each restarted serving group's head
    returns the head's summary, or raises ModuleError to fail the step. Under --check only
    `would(heads)` is said, given the heads' names."""
    groups = run.restarted_groups(ctx.play_hosts)
    if not groups:
        return ModuleResult(msg=nothing_restarted)
    heads = {group: hosts[0] for group, hosts in groups.items()}
    if ctx.check:
        return ModuleResult(msg=would(", ".join(head.name for head in heads.values())))
    return ModuleResult(msg="; ".join(f"{head.name}: {gate(group, head)}"
                                      for group, head in heads.items()))


def serves(run: DeployRun, head: "Host", release: str) -> bool:
    """HEAD's `current` is RELEASE and its engine runs (as the run read the node)."""
    state = run.state(head)
    return state.current == release and state.unit(ENGINE_UNIT).running


def live_previous_head(ctx: ModuleContext, run: DeployRun, group: str,
                       previous: Optional[str]) -> Optional["Host"]:
    """A head of another group that still serves PREVIOUS (not switched by this run, in
    service): what a gate compares GROUP's new release with, side by side."""
    if previous is None:
        return None
    for other in ctx.inventory.serving_groups:
        if other.name == group:
            continue
        head = run.group_head(other.name)
        if head.name in run.restarting or other.name in run.not_serving \
                or other.name in run.in_maintenance:
            continue
        if serves(run, head, previous):
            return head
    return None
