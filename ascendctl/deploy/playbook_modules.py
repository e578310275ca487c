"""The deploy and rollback steps as playbook modules (used by playbooks/deploy.yaml and
playbooks/rollback.yaml). Each is one readable step; their shared state lives in the
run's DeployContext.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.context import DeployContext
from ascendctl.deploy.release import ALL_UNITS, ENGINE_UNITS
from ascendctl.deploy.switch import StepFailed, Switcher, SwitchTarget
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import (
    FileDiff, Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.render.files import release_dir


def _context(ctx: ModuleContext) -> DeployContext:
    context = DeployContext.of(ctx.inventory)
    if context.conn_for is None:
        context.conn_for = ctx.connection_for
    return context


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ReleaseArg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # None / "new": the release this inventory renders; "previous": the last good one
    # before the current; otherwise an existing release id.
    release: Optional[str] = None


@register_module("deploy_lock")
class DeployLock(Module):
    """Take (or give back) the cluster-wide deploy lock held on the head node."""

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        state: Literal["acquired", "released"] = "acquired"

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        head = ctx.inventory.head
        # Taking and giving back the lock leaves nothing changed on the cluster: "ok".
        if args.state == "released":
            held = context.lock_token is not None
            context.release_lock()
            return ModuleResult(msg="lock released" if held else "not held")
        if ctx.check:
            lock = context.ops_for(head).state([])["lock"]
            if lock:
                return ModuleResult(msg=f"locked by {lock.get('holder')} since "
                                    f"{lock.get('since')} (a deploy now would be refused)")
            return ModuleResult(msg="free (not taken in check mode)")
        context.acquire_lock(context.ops_for(head))
        return ModuleResult(msg=f"held by {context.by}")


@register_module("release_facts")
class ReleaseFacts(Module):
    """Read every node's releases, `current`, units, history tail and lock (one call each)."""

    runs_on = "controller"
    Args = _NoArgs

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        try:
            context.states = context.each_host(
                lambda host: context.ops_for(host).state(ALL_UNITS, ip=host.ip))
        except AscendctlError as err:
            raise ModuleError(str(err)) from None
        currents = {name: state.get("current") for name, state in context.states.items()}
        distinct = set(currents.values())
        context.outcome.previous = context.current_release()
        if len(distinct) > 1:
            msg = "nodes disagree on the current release: " + ", ".join(
                f"{n}={c or 'none'}" for n, c in currents.items())
        else:
            msg = f"current release: {distinct.pop() or 'none'}"
        return ModuleResult(msg=msg, data={"current": currents})


@register_module("release_stage")
class ReleaseStage(Module):
    """Write the release directory on the node (atomically); diff against the current."""

    Args = _NoArgs

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        plan = context.release()
        ops = context.ops(ctx.host, ctx.conn)
        answer = ops.stage(plan.release_id, plan.files[ctx.host.name],
                           plan.meta(context.by), check=ctx.check, diff=ctx.diff or ctx.check)
        diffs = [FileDiff(path=f"{release_dir(ctx.inventory.deploy.root, plan.release_id)}/"
                          f"{entry['path']}", before=None, after=None,
                          note=entry.get("diff") or entry["state"])
                 for entry in answer["files"]]
        changed = bool(answer["changed"])
        what = "staged" if not ctx.check else "would stage"
        msg = (f"{what} {plan.release_id} ({len(answer['files'])} files differ from "
               f"{answer['current'] or 'nothing'})" if changed
               else f"{plan.release_id} already staged")
        return ModuleResult(changed=changed, msg=msg, diffs=diffs,
                            data={"release": plan.release_id})


@register_module("weights_push")
class WeightsPush(Module):
    """Push the model to every node's content-addressed store (relayed, resumable)."""

    runs_on = "controller"
    Args = _NoArgs

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        plan = context.weights_plan()
        if plan is None:
            return ModuleResult(msg=f"model.path {ctx.inventory.model.path}: weights are "
                                "already on the nodes")
        from ascendctl.weights.push import gather_states, push

        pool = ctx.pool
        if ctx.check:
            states = gather_states(pool, ctx.inventory, plan, repair=False)
            missing = {n.name: states[n.name].bytes_to_write(n) for n in plan.nodes}
            total = sum(missing.values())
            return ModuleResult(changed=total > 0, msg=f"would send {total} bytes "
                                f"({', '.join(f'{k}: {v}' for k, v in missing.items())})")
        summary = push(ctx.inventory, plan, pool=pool,
                       show_progress=context.options.show_progress)
        if not summary.ok:
            raise ModuleError("; ".join(summary.errors)[:600])
        written = sum(node["written"] for node in summary.nodes.values())
        return ModuleResult(changed=written > 0, msg=f"{written} bytes written in "
                            f"{summary.seconds:.1f}s" if written else "every node has them",
                            data={"push": summary.to_dict()})


@register_module("release_model")
class ReleaseModel(Module):
    """Make `<release>/model` on the node: links into the store (or to model.path)."""

    Args = _NoArgs

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        release = release_dir(ctx.inventory.deploy.root, context.release().release_id)
        dest = f"{release}/model"
        if ctx.check:
            return ModuleResult(msg=f"would link {dest}")
        plan = context.weights_plan()
        if plan is None:
            result = ctx.run(["ln", "-sfnT", "--", ctx.inventory.model.path, dest])
            if not result.ok:
                raise ModuleError(f"cannot link {dest}: {result.stderr.strip()[-200:]}")
            return ModuleResult(msg=f"{dest} -> {ctx.inventory.model.path}")
        from ascendctl.weights.remote import materialise_model, node_access

        node_plan = next(n for n in plan.nodes if n.name == ctx.host.name)
        answer = materialise_model(ctx.conn, node_access(ctx.inventory, ctx.host), node_plan,
                                   dest)
        return ModuleResult(changed=bool(answer.get("changed", False)),
                            msg=f"{dest}: {len(node_plan.files)} files")


@register_module("release_switch")
class ReleaseSwitch(Module):
    """Stop the old engines, start the release in rank order, gate on readiness;
    on any failure put every node back on the previous release."""

    runs_on = "controller"
    Args = _ReleaseArg

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        inv = ctx.inventory
        wanted = resolve_release(context, args.release)
        target = context.target(wanted)
        previous = context.current_release()
        context.outcome.release_id, context.outcome.previous = target.release_id, previous
        if already_serving(context, target, new=wanted is None):
            return ModuleResult(msg=f"{target.release_id} is already serving; nothing restarted")
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would stop {previous or 'nothing'} and start "
                                f"{target.release_id} in rank order "
                                f"({', '.join(h.name for h in inv.hosts)})")
        switcher = Switcher(inv, context.conn_for, context.ops_for, log=context.log)
        running = {h.name: tuple(u for u in ENGINE_UNITS
                                 if context.states[h.name]["units"].get(u, {}).get("load")
                                 == "loaded") for h in inv.hosts}
        try:
            switcher.stop_engines(running, step="stop the old engines")
            answer = switcher.bring_up(target)
        except StepFailed as failure:
            return self.roll_back(context, switcher, target, previous, failure)
        context.outcome.changed = True
        context.outcome.completion = answer.get("completion")
        return ModuleResult(changed=True, msg=f"{target.release_id} serves: "
                            f"{answer.get('completion', '')!r}", data={"ready": answer})

    def roll_back(self, context: DeployContext, switcher: Switcher, target: SwitchTarget,
                  previous: Optional[str], failure: StepFailed) -> ModuleResult:
        outcome = context.outcome
        outcome.failed_step, outcome.failed_node, outcome.reason = \
            failure.step, failure.node, failure.reason
        context.log.note(f"{failure}; rolling back", node=failure.node)
        notes: list[str] = []
        budget = context.inv.serving.startup_timeout
        deadline = time.monotonic() + 2 * budget
        while True:
            try:
                # A node that is rebooting (or was powered back on) may still be going
                # down or come back with the failed release's units enabled: every node
                # must answer, and the failed engines must be stopped everywhere, before
                # the previous release starts in rank order.
                switcher.wait_reachable(budget)
                switcher.stop_engines(target.engine_units, step="stop the failed release")
                if previous and previous != target.release_id:
                    switcher.bring_up(context.target(previous))
                    outcome.rolled_back_to = previous
                notes = []
                break
            except StepFailed as err:
                notes.append(str(err))
                if time.monotonic() > deadline:
                    break
                context.log.note(f"rollback: {err}; retrying", node=err.node)
                time.sleep(10)
        if notes and previous:
            outcome.rollback_failed = "; ".join(notes[-2:])
        record_failure(context, target.release_id, failure)
        where = f"{failure.step} failed on {failure.node}: {failure.reason}"
        if outcome.rolled_back_to:
            msg = f"{where}; every node is back on {previous} and serving"
        elif previous:
            msg = f"{where}; " + "; ".join(notes)
        else:
            msg = f"{where}; there was no previous release, engines are stopped"
        return ModuleResult(failed=True, msg=msg, data={"rolled_back_to": outcome.rolled_back_to})


@register_module("release_commit")
class ReleaseCommit(Module):
    """Point `current` at the release on every node, enable it at boot, record history,
    and prune old releases beyond deploy.keep_releases."""

    runs_on = "controller"
    Args = _ReleaseArg

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        context = _context(ctx)
        inv = ctx.inventory
        release_id = resolve_release(context, args.release)
        target = context.target(release_id)
        previous = context.current_release()
        switched = {h.name: context.states[h.name].get("current") != target.release_id
                    for h in inv.hosts}
        if ctx.check:
            return ModuleResult(changed=any(switched.values()),
                                msg=f"would point current at {target.release_id}")

        def commit(host) -> dict[str, Any]:
            ops = context.ops_for(host)
            result = ops.switch(target.release_id)
            units = target.engine_units[host.name] + target.side_units[host.name]
            ctx.connection_for(host.name).run(["systemctl", "enable", "--quiet", *units])
            if result["changed"] or context.outcome.changed:
                ops.history({"event": "rollback" if args.release else "deployed",
                             "release": target.release_id, "previous": previous,
                             "by": context.by, "time": _now(),
                             "summary": context.release().summary if not args.release
                             else None})
            return ops.prune(inv.deploy.keep_releases,
                             [r for r in (target.release_id, previous) if r])

        try:
            pruned = context.each_host(commit)
        except AscendctlError as err:
            raise ModuleError(str(err)) from None
        removed = sorted({r for p in pruned.values() for r in p["removed"]})
        changed = any(switched.values()) or bool(removed)
        msg = f"current -> {target.release_id}" + (f"; pruned {', '.join(removed)}"
                                                    if removed else "")
        return ModuleResult(changed=changed, msg=msg)


def resolve_release(context: DeployContext, wanted: Optional[str]) -> Optional[str]:
    """None for the inventory's new release; an existing id otherwise."""
    if wanted in (None, "", "new"):
        return None
    if wanted == "previous":
        found = previous_good_release(context)
        if found is None:
            raise ModuleError("no earlier good release to roll back to (see `ascendctl history`)")
        return found
    for host in context.inv.hosts:
        ids = {r["id"] for r in context.states[host.name].get("releases", [])}
        if wanted not in ids:
            raise ModuleError(f"release {wanted} is not on {host.name} (pruned or never "
                              "deployed there); see `ascendctl history`")
    return wanted


def previous_good_release(context: DeployContext) -> Optional[str]:
    """The newest release deployed before the current one that did not fail and is still
    on every node."""
    head_state = context.states[context.inv.head.name]
    current = head_state.get("current")
    on_every_node = set.intersection(*[
        {r["id"] for r in context.states[h.name].get("releases", []) if r["status"] != "failed"}
        for h in context.inv.hosts])
    for event in reversed(head_state.get("history", [])):
        release = event.get("release")
        if event.get("event") in ("deployed", "rollback") and release != current \
                and release in on_every_node:
            return release
    return None


def already_serving(context: DeployContext, target: SwitchTarget, *, new: bool) -> bool:
    """Every node is on the target with its units installed as the release has them and
    the engines running: a second deploy restarts nothing."""
    plan = context.release() if new else None
    for host in context.inv.hosts:
        state = context.states[host.name]
        if state.get("current") != target.release_id:
            return False
        for unit in target.engine_units[host.name] + target.side_units[host.name]:
            unit_state = state["units"].get(unit, {})
            if unit_state.get("active") != "active":
                return False
            if plan is not None:
                wanted = next(f for f in plan.files[host.name] if f.path == f"units/{unit}")
                if unit_state.get("installed_sha") != hashlib.sha256(wanted.content).hexdigest():
                    return False
    return True


def record_failure(context: DeployContext, release_id: str, failure: StepFailed) -> None:
    def one(host) -> None:
        ops = context.ops_for(host)
        ops.mark(release_id, "failed")
        ops.history({"event": "failed", "release": release_id, "by": context.by,
                     "time": _now(), "step": failure.step, "node": failure.node,
                     "reason": failure.reason[:300],
                     "rolled_back_to": context.outcome.rolled_back_to})

    for host in context.inv.hosts:
        try:
            one(host)
        except AscendctlError:
            pass  # an unreachable node cannot be marked; the others' history says it


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
