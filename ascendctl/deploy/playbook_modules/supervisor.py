"""supervisor_hold: keep the head's gang supervisor from "recovering" engines a deploy is
switching (docs/health.md).

While `<deploy.root>/supervisor.hold` is in force the supervisor only observes. The hold
names its own expiry (twice the start-up budget and a margin), so a deploy that dies with
the engines stopped does not leave the group unsupervised: once the hold expires, the
supervisor brings the group back by itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.lock import LockLost
from ascendctl.deploy.run import DeployRun
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.render.timeouts import RANK_START_WAIT_S

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote

HOLD_FILE = "supervisor.hold"        # runtime/ascendctl_runtime/healthstore.py reads it
HOLD_MARGIN_S = 300.0


@dataclass
class SupervisorHold:
    """The heads this run holds the supervisor on (one per switching serving group)."""

    heads: list[str] = field(default_factory=list)


def hold_seconds(startup_timeout: float, ranks: int) -> float:
    return 2 * startup_timeout + ranks * RANK_START_WAIT_S + HOLD_MARGIN_S


UNHOLD_WAIT_S = 20.0
STATE_FILE = "health/supervisor.json"   # the supervisor's published state (healthstore)

# Exit 0 once the supervisor has written its state after the hold went (a state newer than
# the hold's removal, no longer held): status right after a deploy reads the truth.
_UNHELD = r"""
import json, os, sys, time
path, since, limit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
deadline = time.time() + limit
while time.time() < deadline:
    try:
        fresh = os.stat(path).st_mtime > since
        state = json.load(open(path))
    except (OSError, ValueError):
        fresh, state = False, {}
    if fresh and not state.get("held"):
        sys.exit(0)
    time.sleep(0.5)
sys.exit(1)
"""


def _wait_unheld(conn: "Remote", root: str, python: str) -> bool:
    """Wait (bounded) until the head's supervisor has noticed the hold is gone."""
    now = conn.run(["date", "+%s.%N"], timeout=30)
    since = now.stdout.strip() if now.ok else "0"
    result = conn.run([python, "-c", _UNHELD, f"{root}/{STATE_FILE}", since,
                       str(UNHOLD_WAIT_S)], timeout=UNHOLD_WAIT_S + 30)
    return result.ok


@register_module("supervisor_hold")
class SupervisorHoldModule(Module):
    """Hold the gang supervisor on the head of each of the play's serving groups before
    its engines stop (only when the group restarts), or give the holds back (after the
    group is back in service, and always at the end)."""

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        state: Literal["held", "released"] = "held"

    def run(self, ctx: ModuleContext, args: Args) -> ModuleResult:
        run = DeployRun.of(ctx)
        hold = ctx.run_state.part(SupervisorHold, SupervisorHold)
        path = f"{ctx.inventory.deploy.root}/{HOLD_FILE}"
        if args.state == "released":
            return self._release(ctx, hold, path)
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
            body = json.dumps({"until": round(time.time() + seconds, 3), "by": run.by,
                               "reason": "deploy switching the engines"}) + "\n"
            try:
                ctx.connection_for(head.name).write_file(path, body, mode=0o644)
            except AscendctlError as err:
                raise ModuleError(f"cannot hold the supervisor on {head.name}: {err}") from None
            if head.name not in hold.heads:
                hold.heads.append(head.name)
            held.append(f"held on {head.name} for up to {seconds:.0f} s")
        if not held:
            return ModuleResult(msg="nothing restarts: the supervisor keeps watching")
        suffix = "" if ctx.check else " (expires by itself)"
        return ModuleResult(changed=True, msg="; ".join(held) + suffix)

    def _release(self, ctx: ModuleContext, hold: SupervisorHold, path: str) -> ModuleResult:
        if not hold.heads:
            return ModuleResult(msg="not held by this run")
        if ctx.check:
            return ModuleResult(msg=f"would remove {path} on {', '.join(hold.heads)}")
        released, silent = [], []
        for head in list(hold.heads):
            result = ctx.connection_for(head).run(["rm", "-f", "--", path], timeout=60)
            if not result.ok:
                raise ModuleError(f"cannot remove {path} on {head}: "
                                  f"{result.stderr.strip()[-200:]}")
            hold.heads.remove(head)
            released.append(head)
            if not _wait_unheld(ctx.connection_for(head), ctx.inventory.deploy.root,
                                ctx.inventory.deploy.python):
                silent.append(head)
        quiet = (f" ({', '.join(silent)} has not said so within {UNHOLD_WAIT_S:.0f} s)"
                 if silent else "")
        return ModuleResult(changed=True,
                            msg=f"supervisor on {', '.join(released)} acts again{quiet}")
