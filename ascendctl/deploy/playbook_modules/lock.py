"""deploy_lock: take (or give back) the cluster-wide deploy lock held on the head node."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.handoffs import DEPLOY_LOCK
from ascendctl.deploy.lock import DeployLocked
from ascendctl.deploy.run import DeployRun
from ascendctl.playbook.modules import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)


@register_module("deploy_lock")
class DeployLock(Module):
    """Take the lock (refused while another deploy holds it; a stale one only with
    --force-unlock, a live one only with --force-unlock --really), or give it back.

    While held, a heartbeat keeps it fresh; a holder that finds its token gone asks the
    run to stop at the next step (no rescue: the cluster is the new holder's)."""

    provides = (DEPLOY_LOCK,)
    order_by = ("state", {"released": ((), ())})

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        state: Literal["acquired", "released"] = "acquired"

    def run(self, ctx: ModuleContext, args: Args) -> ModuleResult:
        run = DeployRun.of(ctx)
        head = run.anchor
        ops = run.ops(head, ctx.connection_for(head.name))
        # Taking and giving back the lock leaves nothing changed on the cluster: "ok".
        if args.state == "released":
            return ModuleResult(msg=run.lock.release())
        if ctx.check:
            lock = ops.state([]).lock
            if lock is not None:
                return ModuleResult(msg=f"locked by {lock.describe()} (a deploy now would be "
                                    "refused)")
            return ModuleResult(msg="free (not taken in check mode)")

        def lost(reason: str) -> None:
            run.outcome.lock_lost = reason
            run.log.note(reason, node=head.name)
            ctx.run_state.request_stop(reason, rescue=False)

        run.lock.on_lost = lost
        try:
            answer = run.lock.acquire(ops, ctx.inventory.cluster.name, run.options.force_unlock)
        except DeployLocked as err:
            run.outcome.lock_holder = err.holder
            raise ModuleError(str(err)) from None
        if answer.broke is not None:
            run.outcome.lock_broken = answer.broke
            return ModuleResult(msg=f"held by {run.by}; broke the lock of "
                                f"{answer.broke.describe()} (last heartbeat "
                                f"{answer.broke.heartbeat_age_s:.0f} s ago)")
        return ModuleResult(msg=f"held by {run.by}")
