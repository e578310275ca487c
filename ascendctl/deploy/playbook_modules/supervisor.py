"""supervisor_hold: keep the head's gang supervisor from "recovering" engines a deploy is
switching (docs/health.md).

While `<deploy.root>/supervisor.hold` is in force the supervisor only observes. The hold
names its own expiry (twice the start-up budget and a margin), so a deploy that dies with
the engines stopped does not leave the group unsupervised: once the hold expires, the
supervisor brings the group back by itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ascendctl_runtime.gangrules import RANK_START_WAIT_S
from ascendctl_runtime.layout import HOLD_FILE
from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.handoffs import DEPLOY_LOCK
from ascendctl.deploy.lock import LockLost
from ascendctl.deploy.run import DeployRun
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.transport.nodecall import call_node

HOLD_MARGIN_S = 300.0
UNHOLD_WAIT_S = 20.0
CALL_MARGIN_S = 30.0


@dataclass
class SupervisorHold:
    """The heads this run holds the supervisor on (one per switching serving group)."""

    heads: list[str] = field(default_factory=list)


def hold_seconds(startup_timeout: float, ranks: int) -> float:
    return 2 * startup_timeout + ranks * RANK_START_WAIT_S + HOLD_MARGIN_S


def _hold_call(ctx: ModuleContext, head: str, op: str, *, timeout: float,
               **kwargs: Any) -> dict[str, Any]:
    """One operation of ascendctl_runtime.hold_node on HEAD (the hold is written and read
    there by the same code, healthstore.py)."""
    inv = ctx.inventory
    return call_node(ctx.connection_for(head), node=head, python=inv.deploy.python,
                     entry="hold_node", timeout=timeout,
                     request={"op": op, "kwargs": {"root": inv.deploy.root, **kwargs}})


@register_module("supervisor_hold")
class SupervisorHoldModule(Module):
    """Hold the gang supervisor on the head of each of the play's serving groups before
    its engines stop (only when the group restarts), or give the holds back (after the
    group is back in service, and always at the end)."""

    needs = (DEPLOY_LOCK,)
    order_by = ("state", {"released": ((), ())})      # also in always plays

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        state: Literal["held", "released"] = "held"

    def run(self, ctx: ModuleContext, args: Args) -> ModuleResult:
        run = DeployRun.of(ctx)
        hold = ctx.run_state.part(SupervisorHold, SupervisorHold)
        if args.state == "released":
            return self._release(ctx, hold)
        run.require_no_failure(ctx)
        held = []
        for hosts in run.groups_of(run.hosts(ctx.play_hosts)).values():
            if run.already_serving(hosts):
                continue
            head = hosts[0]
            seconds = hold_seconds(ctx.inventory.serving.startup_timeout, len(hosts))
            if ctx.check:
                held.append(f"would hold the supervisor on {head.name} for up to "
                            f"{seconds:.0f} s")
                continue
            try:
                run.lock.verify()
            except LockLost as err:
                raise ModuleError(f"{err}: stopping before touching the supervisor") from None
            try:
                _hold_call(ctx, head.name, "hold", timeout=CALL_MARGIN_S, seconds=seconds,
                           by=run.by, reason="deploy switching the engines")
            except AscendctlError as err:
                raise ModuleError(f"cannot hold the supervisor on {head.name}: {err}") from None
            if head.name not in hold.heads:
                hold.heads.append(head.name)
            held.append(f"held on {head.name} for up to {seconds:.0f} s")
        if not held:
            return ModuleResult(msg="nothing restarts: the supervisor keeps watching")
        suffix = "" if ctx.check else " (expires by itself)"
        return ModuleResult(changed=True, msg="; ".join(held) + suffix)

    def _release(self, ctx: ModuleContext, hold: SupervisorHold) -> ModuleResult:
        if not hold.heads:
            return ModuleResult(msg="not held by this run")
        if ctx.check:
            return ModuleResult(msg=f"would remove {ctx.inventory.deploy.root}/{HOLD_FILE} "
                                    f"on {', '.join(hold.heads)}")
        released, silent = [], []
        for head in list(hold.heads):
            try:
                answer = _hold_call(ctx, head, "release", wait_s=UNHOLD_WAIT_S,
                                    timeout=UNHOLD_WAIT_S + CALL_MARGIN_S)
            except AscendctlError as err:
                raise ModuleError(f"cannot release the supervisor on {head}: {err}") from None
            hold.heads.remove(head)
            released.append(head)
            if not answer.get("acknowledged"):
                silent.append(head)
        quiet = (f" ({', '.join(silent)} has not said so within {UNHOLD_WAIT_S:.0f} s)"
                 if silent else "")
        return ModuleResult(changed=True,
                            msg=f"supervisor on {', '.join(released)} acts again{quiet}")
