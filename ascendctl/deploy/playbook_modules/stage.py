"""release_facts, release_stage, weights_push, release_model: everything before the
engines are touched."""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from ascendctl_runtime.layout import ALL_UNITS

from ascendctl.deploy.handoffs import DEPLOY_LOCK, NODE_STATES, RELEASE_ON_NODES, WEIGHTS
from ascendctl.deploy.nodestate import NodeState
from ascendctl.deploy.playbook_modules.common import NoArgs
from ascendctl.deploy.run import DeployRun, previous_good_release
from ascendctl.playbook.modules import (
    FileDiff, Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.render.files import release_dir
from ascendctl.weights.push import gather_states, push
from ascendctl.weights.remote import materialise_model, node_access


@register_module("release_facts")
class ReleaseFacts(Module):
    """Read every play host's releases, `current`, units, history tail and lock (one call
    each, in parallel), and settle which release this run switches to."""

    needs = (DEPLOY_LOCK,)
    provides = (NODE_STATES, RELEASE_ON_NODES)

    @classmethod
    def order(cls, args: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        # naming a release (a rollback) picks one already on the nodes
        return cls.needs, (cls.provides if args.get("release") else (NODE_STATES,))

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        # new (default): the release this inventory renders; previous: the last good one
        # before the current; otherwise an existing release id (rollback --to).
        release: Optional[str] = None

    def run(self, ctx: ModuleContext, args: Args) -> ModuleResult:
        run = DeployRun.of(ctx)
        inv = ctx.inventory
        hosts = run.hosts(ctx.play_hosts)
        results = ctx.pool.map(lambda conn: run.ops(inv.host(conn.name), conn).state(
            ALL_UNITS, ip=inv.host(conn.name).ip), [h.name for h in hosts])
        failed = {name: r.error or "failed" for name, r in results.items() if not r.ok}
        if failed:
            return ModuleResult(failed=True, msg="; ".join(f"{n}: {e}" for n, e in failed.items()),
                                per_host={name: ModuleResult(failed=name in failed,
                                                             msg=failed.get(name, ""))
                                          for name in results})
        states: dict[str, NodeState] = {name: r.value for name, r in results.items()
                                        if r.value is not None}
        run.states.update(states)
        run.outcome.previous = run.current_release()
        run.group_previous.update({g.name: states[g.head].current
                                   for g in inv.serving_groups if g.head in states})
        run.outcome.group_previous = dict(run.group_previous)
        run.wanted = resolve_release(run, args.release)
        if run.wanted is None:
            # the engine's identity is part of the release id; a container engine without
            # an archive is identified by the nodes (every node must hold the same image)
            run.engine_plan(ctx.pool)
        currents = {name: state.current for name, state in states.items()}
        distinct = set(currents.values())
        if len(distinct) > 1:
            msg = "nodes disagree on the current release: " + ", ".join(
                f"{n}={c or 'none'}" for n, c in currents.items())
        else:
            msg = f"current release: {distinct.pop() or 'none'}"
        if run.wanted is not None:
            msg += f"; switching to {run.wanted}"
        return ModuleResult(msg=msg, data={"current": currents})


def resolve_release(run: DeployRun, wanted: Optional[str]) -> Optional[str]:
    """None for the inventory's new release; an existing id otherwise."""
    if wanted in (None, "", "new"):
        return None
    if wanted == "previous":
        found = previous_good_release(run.inv, run.states, run.members)
        if found is None:
            raise ModuleError("no earlier good release to roll back to (see `ascendctl history`)")
        return found
    for host in run.members:
        if wanted not in run.state(host).release_ids:
            raise ModuleError(f"release {wanted} is not on {host.name} (pruned or never "
                              "deployed there); see `ascendctl history`")
    return wanted


@register_module("release_stage")
class ReleaseStage(Module):
    """Write the release directory on the node (atomically); diff against the current."""

    needs = (DEPLOY_LOCK, NODE_STATES)
    provides = (RELEASE_ON_NODES,)

    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        plan = run.release()
        run.target()
        answer = run.ops(ctx.host, ctx.conn).stage(
            plan.release_id, plan.files[ctx.host.name], plan.meta(run.by), check=ctx.check,
            diff=ctx.diff or ctx.check)
        directory = release_dir(ctx.inventory.deploy.root, plan.release_id)
        diffs = [FileDiff(path=f"{directory}/{entry.path}", before=None, after=None,
                          note=entry.diff or entry.state) for entry in answer.files]
        what = "staged" if not ctx.check else "would stage"
        msg = (f"{what} {plan.release_id} ({len(answer.files)} files differ from "
               f"{answer.current or 'nothing'})" if answer.changed
               else f"{plan.release_id} already staged")
        return ModuleResult(changed=answer.changed, msg=msg, diffs=diffs,
                            data={"release": plan.release_id})


@register_module("weights_push")
class WeightsPush(Module):
    """Push the model to every node's content-addressed store (relayed, resumable)."""

    needs = (DEPLOY_LOCK,)
    provides = (WEIGHTS,)

    runs_on = "controller"
    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        plan = run.weights_plan()
        if plan is None:
            return ModuleResult(msg=f"model.path {ctx.inventory.model.path}: weights are "
                                "already on the nodes")
        if run.in_maintenance:      # nodes in maintenance get nothing (they are not here)
            members = {h.name for h in run.members}
            plan = dataclasses.replace(plan, nodes=[n for n in plan.nodes if n.name in members])

        pool = ctx.pool
        if ctx.check:
            states = gather_states(pool, ctx.inventory, plan, repair=False)
            missing = {n.name: states[n.name].bytes_to_write(n) for n in plan.nodes}
            total = sum(missing.values())
            return ModuleResult(changed=total > 0, msg=f"would send {total} bytes "
                                f"({', '.join(f'{k}: {v}' for k, v in missing.items())})")
        summary = push(ctx.inventory, plan, pool=pool, show_progress=run.options.show_progress)
        if not summary.ok:
            raise ModuleError("; ".join(summary.errors)[:600])
        written = sum(node["written"] for node in summary.nodes.values())
        return ModuleResult(changed=written > 0, msg=f"{written} bytes written in "
                            f"{summary.seconds:.1f}s" if written else "every node has them",
                            data={"push": summary.to_dict()})


@register_module("release_model")
class ReleaseModel(Module):
    """Make `<release>/model` on the node: links into the store (or to model.path)."""

    needs = (RELEASE_ON_NODES, WEIGHTS)

    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        release = release_dir(ctx.inventory.deploy.root, run.release().release_id)
        dest = f"{release}/model"
        if ctx.check:
            return ModuleResult(msg=f"would link {dest}")
        plan = run.weights_plan()
        if plan is None:
            model_path = ctx.inventory.model.path or ""
            result = ctx.run(["ln", "-sfnT", "--", model_path, dest])
            if not result.ok:
                raise ModuleError(f"cannot link {dest}: {result.stderr.strip()[-200:]}")
            return ModuleResult(msg=f"{dest} -> {model_path}")

        node_plan = next(n for n in plan.nodes if n.name == ctx.host.name)
        answer = materialise_model(ctx.conn, node_access(ctx.inventory, ctx.host), node_plan,
                                   dest)
        return ModuleResult(changed=bool(answer.get("changed", False)),
                            msg=f"{dest}: {len(node_plan.files)} files")
