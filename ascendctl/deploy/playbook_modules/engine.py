"""engine_present: the release's engine on every node of the play before any engine stops.

Deploy: the inventory's engine (ascendctl/engine/present.py) — an image archive relayed
into the stores of the nodes that lack the image and loaded there (the loaded ID must be
the archive's), an image every node must already hold, or a venv built offline from the
wheelhouse. A node that already has it costs one read; nothing travels. Rollback: the
engine the chosen release recorded must still be on every node (nothing is loaded: the
archive on the jump host may hold another image by now).

Every refusal names the node and happens before `engine_stop`: the release that serves
keeps serving.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendctl.deploy.handoffs import DEPLOY_LOCK, RELEASE_ON_NODES
from ascendctl.deploy.playbook_modules.common import DeployStep
from ascendctl.deploy.run import DeployRun
from ascendctl.engine.identity import EngineError, EngineIdentity
from ascendctl.engine.kinds import kind_named, kind_of, recorded_spec
from ascendctl.engine.nodeops import EngineNodeOps
from ascendctl.engine.present import engine_status, ensure_engine
from ascendctl.playbook.modules import (
    ModuleContext, ModuleError, ModuleResult, register_module,
)

if TYPE_CHECKING:
    from ascendctl.inventory import Host
    from ascendctl.transport.remote import Remote


@register_module("engine_present")
class EnginePresent(DeployStep):
    """Make the release's engine present on the play's hosts (image loaded or venv built
    where missing); refuse, naming the node, when it cannot be."""

    needs = (DEPLOY_LOCK, RELEASE_ON_NODES)

    runs_on = "controller"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        hosts = run.hosts(ctx.play_hosts)
        if run.wanted is not None:
            return self._recorded(ctx, run, hosts)

        plan = run.engine_plan()
        unmanaged = kind_of(ctx.inventory.engine).unmanaged(ctx.inventory)
        if unmanaged is not None:
            return ModuleResult(msg=unmanaged)
        try:
            if ctx.check:
                done = engine_status(ctx.inventory, ctx.pool, plan, hosts=hosts)
            else:
                done = ensure_engine(ctx.inventory, ctx.pool, plan, hosts=hosts,
                                     show_progress=run.options.show_progress)
        except EngineError as err:
            raise ModuleError(str(err)) from None
        for node in done.values():
            if node.changed and not ctx.check:
                run.log.note(f"{node.node}: {node.detail}", node=node.node)
        per_host = {name: ModuleResult(changed=node.changed, msg=node.detail)
                    for name, node in done.items()}
        changed = [n for n, node in done.items() if node.changed]
        verb = "would make" if ctx.check else "made"
        msg = (f"{verb} {plan.identity.short} present on {', '.join(changed)}" if changed
               else f"{plan.identity.short} present on every node")
        return ModuleResult(changed=bool(changed), msg=msg, per_host=per_host,
                            data={"engine": plan.identity.to_dict()})

    def _recorded(self, ctx: ModuleContext, run: DeployRun, hosts: list["Host"]) -> ModuleResult:
        identity = run.target_engine()
        if identity is None:
            return ModuleResult(msg=f"{run.wanted} runs the site's engine executable")
        results = ctx.pool.map(lambda conn: _present(ctx, run, conn, identity),
                               [h.name for h in hosts])
        missing = sorted(n for n, r in results.items() if not r.ok or not r.value)
        if missing:
            what = kind_named(identity.kind).describe(identity)
            errors = "; ".join(f"{n}: {results[n].error}" for n in missing if not results[n].ok)
            raise ModuleError(f"{run.wanted} runs {what}, which is not on "
                              f"{', '.join(missing)} any more"
                              + (f" ({errors})" if errors else "")
                              + ": deploy that release's inventory again instead")
        return ModuleResult(msg=f"{identity.short} of {run.wanted} present on every node")


def _present(ctx: ModuleContext, run: DeployRun, conn: "Remote", identity: EngineIdentity) -> bool:
    host = run.inv.host(conn.name)
    release = run.state(host).release(run.wanted or "")
    recorded = (release.summary.get("engine") if release else None) or {}
    ops = EngineNodeOps(conn, node=host.name, root=run.inv.deploy.root,
                        python=run.inv.deploy.python,
                        spec=recorded_spec(recorded, run.inv.engine), become=ctx.become)
    return kind_named(identity.kind).is_present(ops, identity)
