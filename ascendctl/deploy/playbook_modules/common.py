"""What the deploy step modules share: argument models and group results."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.engines import EngineControl, StepFailed
from ascendctl.playbook.modules import ModuleContext, ModuleResult

if TYPE_CHECKING:
    from ascendctl.deploy.run import DeployRun
    from ascendctl.inventory import Host


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def engine(ctx: ModuleContext, run: "DeployRun", host: "Host", step: str) -> EngineControl:
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
