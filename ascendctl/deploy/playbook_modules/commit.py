"""release_commit and release_prune: make the switch permanent, then tidy up."""

from __future__ import annotations

from ascendctl.deploy.handoffs import COMMITTED, DEPLOY_LOCK, ENGINES_READY
from ascendctl.deploy.playbook_modules.common import DeployStep, NoArgs
from ascendctl.deploy.run import DeployRun, now
from ascendctl.engine.kinds import identity_from_record, kind_named, recorded_spec
from ascendctl.engine.nodeops import EngineNodeOps
from ascendctl.engine.present import kept_engines
from ascendctl.playbook.modules import Module, ModuleContext, ModuleError, ModuleResult, register_module
from ascendctl.transport import quoting


@register_module("release_commit")
class ReleaseCommit(DeployStep):
    """Point `current` at the release on this node (a new link renamed over the old one),
    enable its units at boot, mark it active and record the event in the history."""

    needs = (DEPLOY_LOCK, ENGINES_READY)
    provides = (COMMITTED,)

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        host = ctx.host
        target = run.target()
        state = run.state(host)
        units = target.units(host.name)
        restarted = host.name in run.restarting
        release = state.release(target.release_id)
        in_place = state.current == target.release_id and release is not None \
            and release.status == "active" and all(state.unit(u).enabled for u in units)
        if in_place and not restarted:
            return ModuleResult(msg=f"current is {target.release_id}")
        if ctx.check:
            return ModuleResult(changed=state.current != target.release_id,
                                msg=f"would point current at {target.release_id}")
        ops = run.ops(host, ctx.conn)
        run.done.add("committed", [host.name], previous=state.current)
        answer = ops.switch(target.release_id)
        result = ctx.run(["systemctl", "enable", "--quiet", *units])
        if not result.ok:
            raise ModuleError(f"systemctl enable {quoting.join_argv(units)}: "
                              f"{result.stderr.strip()[-200:] or f'exit {result.exit_status}'}")
        rollback = run.wanted is not None
        if answer.changed or restarted:
            ops.history({"event": "rollback" if rollback else "deployed",
                         "release": target.release_id,
                         "previous": run.previous_of(host.serving_group),
                         "by": run.by, "time": now(),
                         "summary": None if rollback else run.release().summary})
        if restarted:
            run.outcome.changed = True
            group = host.serving_group
            if host.name == run.group_head(group).name and group not in run.outcome.switched_groups:
                run.outcome.switched_groups.append(group)
        return ModuleResult(changed=answer.changed or restarted,
                            msg=f"current -> {target.release_id}" +
                            (f" (was {answer.previous})" if answer.previous else ""))


@register_module("release_prune")
class ReleasePrune(Module):
    """Remove the oldest releases beyond deploy.keep_releases (failed ones first; never the
    current or the previous one), and staging directories a dead deploy left."""

    needs = (COMMITTED,)

    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        keep = ctx.inventory.deploy.keep_releases
        state = run.state(ctx.host)
        target = run.target().release_id
        protect = [r for r in (target, run.outcome.previous,
                               run.previous_of(ctx.host.serving_group)) if r]
        if len(state.release_ids | {target}) <= keep and not state.leftovers:
            return ModuleResult(msg=f"{len(state.release_ids | {target})} release(s), "
                                f"keep_releases {keep}: nothing to prune")
        answer = run.ops(ctx.host, ctx.conn).prune(keep, protect, check=ctx.check)
        verb = "would prune" if ctx.check else "pruned"
        engines = prune_engines(ctx, run, state, removed=answer.removed)
        msg = f"{verb} {', '.join(answer.removed)}" if answer.removed else "nothing to prune"
        if engines:
            msg += f"; {verb} {engines}"
        return ModuleResult(changed=answer.changed or bool(engines), msg=msg)


def prune_engines(ctx: ModuleContext, run: DeployRun, state, *, removed) -> str:
    """Remove the images ascendctl loaded and the venvs it built that no release left on
    the node uses (images the site put there are never touched). '' when none."""
    if not removed:
        return ""
    records = {r.id: (r.summary.get("engine") or {}) for r in state.releases}
    target = run.target().release_id
    if run.wanted is None:
        records[target] = run.release().summary.get("engine") or {}
    gone_ids = set(removed)
    identities = {rid: identity_from_record(e) for rid, e in records.items()}
    kept = {rid: i for rid, i in identities.items() if i and rid not in gone_ids}
    gone = [i for rid, i in identities.items() if i and rid in gone_ids]
    if not any(kind_named(i.kind).node_objects(i) for i in gone):
        return ""
    images, venvs = kept_engines(kept)
    # the runtime of a release's recorded engine, kept ones first (the inventory's may
    # have changed since)
    order = sorted(records, key=lambda rid: rid in gone_ids)
    specs = (recorded_spec(records[rid], run.inv.engine) for rid in order)
    spec = next((s for s in specs if s.runtime), recorded_spec({}, run.inv.engine))
    ops = EngineNodeOps(ctx.conn, node=ctx.host.name, root=run.inv.deploy.root,
                        python=run.inv.deploy.python, spec=spec, become=ctx.become)
    answer = ops.prune(keep_images=images, keep_venvs=venvs, check=ctx.check)
    if answer.failed:
        raise ModuleError("engine prune: " + "; ".join(
            f"{f.get('image') or f.get('venv')}: {f.get('error')}" for f in answer.failed))
    parts = [f"image {i.removeprefix('sha256:')[:12]}" for i in answer.images] + \
        [f"venv {v[:12]}" for v in answer.venvs]
    return ", ".join(parts)
