"""release_restore, the deploy's rescue step: when a step after the old engines stopped
failed, put every touched node back on the release that served before, in rank order,
gated on the same readiness, and mark the new release failed.

A node that went down (rebooted, powered off and back on) is waited for within twice
serving.startup_timeout; the whole restore is retried until then. When the engines were
never touched it does nothing (the old release still serves).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from ascendctl_runtime.layout import ALL_UNITS
from ascendctl.deploy.handoffs import NODE_STATES
from ascendctl.deploy.engines import POLL_S, StepFailed
from ascendctl.deploy.playbook_modules.common import NoArgs, engine
from ascendctl.deploy.playbook_modules.switch import still_up
from ascendctl.deploy.run import DeployRun, SwitchTarget, existing_target, now
from ascendctl.deploy.switchlog import started_record
from ascendctl.errors import AscendctlError
from ascendctl.inventory import Host
from ascendctl.playbook.modules import Module, ModuleContext, ModuleResult, register_module
from ascendctl.transport.errors import ConnectError

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote

RETRY_S = 10.0


@register_module("release_restore")
class ReleaseRestore(Module):
    """Stop the failed release's engines, start the previous release in rank order and
    gate on readiness, point `current` back at it; mark the failed release (rescue play)."""

    needs = (NODE_STATES,)

    runs_on = "controller"
    supports_check = False
    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        outcome = run.outcome
        failure = ctx.run_state.failure
        if failure is not None:
            outcome.failed_step, outcome.failed_node, outcome.reason = \
                failure.task, failure.host, failure.msg
            if failure.host in run.inv.host_names:
                outcome.failed_group = run.inv.host(failure.host).serving_group
        hosts = [h for h in run.hosts(ctx.play_hosts)
                 if h.name in run.touched and h.name not in run.settled]
        if not hosts:
            return ModuleResult(msg="the engines were not touched: nothing to restore")
        target = run.target()
        where = f"{failure.task} failed on {failure.host}" if failure else "the run stopped"
        done, problems, stopped = [], [], []
        for group, members in run.groups_of(hosts).items():
            previous = run.previous_of(group)
            back = previous if previous and previous != target.release_id else None
            label = f"serving group {group}" if run.inv.replicated else "every node"
            run.log.note(f"{where}; restoring {back or 'nothing (no previous release)'}"
                         + (f" on {group}" if run.inv.replicated else ""))
            notes = restore(ctx, run, members, target, back)
            if group in outcome.switched_groups:
                outcome.switched_groups.remove(group)
            if notes:
                outcome.rollback_failed = "; ".join(notes[-2:])
                run.done.add("not_serving", [group])
                problems.append(f"restoring {back or 'the stopped state'} on {label} "
                                f"failed: {notes[-1]}")
            elif back is not None:
                outcome.rolled_back_to = back
                outcome.restored_groups.append(group)
                done.append(f"{label} is back on {back} and serving")
            else:
                run.done.add("not_serving", [group])
                stopped.append(label)
            run.done.add("settled", [h.name for h in members])
        record_failure(ctx, run, target.release_id)
        if problems or stopped:
            outcome.currents = read_currents(ctx, run)
        if problems:
            return ModuleResult(failed=True, msg=f"{where}; " + "; ".join(problems))
        if stopped and not done:
            return ModuleResult(changed=True, msg=f"{where}; there was no previous release: "
                                "engines are stopped")
        return ModuleResult(changed=True, msg=f"{where}; " + "; ".join(done) +
                            f"; {target.release_id} is marked failed")


def restore(ctx: ModuleContext, run: DeployRun, hosts: list[Host], failed: SwitchTarget,
            back: Optional[str]) -> list[str]:
    """Retry the whole restore until it works or the budget is spent; the failures."""
    budget = run.inv.serving.startup_timeout
    deadline = time.monotonic() + 2 * budget
    notes: list[str] = []
    while True:
        try:
            # A node that is rebooting (or was powered back on) may still be going down
            # or come back with the failed release's units enabled: every node must answer
            # and the failed engines must be stopped everywhere before the previous
            # release starts in rank order.
            wait_reachable(ctx, run, hosts, budget)
            stop(ctx, run, hosts, failed)
            if back is not None:
                bring_up(ctx, run, hosts, existing_target(run.inv, run.states, back,
                                                          run.members))
            point_current(ctx, run, hosts, back)
            return []
        except StepFailed as err:
            notes.append(str(err))
            if time.monotonic() > deadline or ctx.cancel.is_set():
                return notes
            run.log.note(f"restore: {err}; retrying", node=err.node)
            if ctx.cancel.wait(RETRY_S):
                return notes


def wait_reachable(ctx: ModuleContext, run: DeployRun, hosts: list[Host],
                   budget_s: float) -> None:
    """Every node answers again within budget_s (connections re-opened as needed)."""
    deadline = time.monotonic() + budget_s

    def one(conn: "Remote") -> Optional[str]:
        fresh = conn.failure is None and conn.is_open
        while True:
            try:
                if not fresh:
                    conn.reconnect()
                if conn.exec("true", timeout=30).ok:
                    return None
            except ConnectError as err:
                fresh = False
                if time.monotonic() > deadline:
                    return f"unreachable for {budget_s:.0f}s: {err.reason}"
                run.log.note(f"{conn.name} unreachable ({err.reason}); waiting", node=conn.name)
            if ctx.cancel.wait(POLL_S * 2):
                return "interrupted"

    results = ctx.pool.map(one, [h.name for h in hosts])
    for host in hosts:
        result = results[host.name]
        reason = result.value if result.ok else result.error
        if reason:
            raise StepFailed("wait for the nodes", host.name, reason)


def stop(ctx: ModuleContext, run: DeployRun, hosts: list[Host], failed: SwitchTarget) -> None:
    """The failed release's engines, followers first."""
    for host in reversed(hosts):
        control = engine(ctx, run, host, "stop the failed release")
        for unit in reversed(failed.engine_units.get(host.name, ())):
            run.log.note(f"stopping {unit} on {host.name}", node=host.name)
            control.systemctl("stop", unit)


def bring_up(ctx: ModuleContext, run: DeployRun, hosts: list[Host], target: SwitchTarget) -> None:
    """Install the release's units, start the ranks in order, gate on readiness (with a
    streamed completion), start the node services."""
    changed: dict[str, list[str]] = {}

    def install(conn: "Remote") -> list[str]:
        host = run.inv.host(conn.name)
        return run.ops(host, conn).install_units(target.release_id, target.units(host.name))

    results = ctx.pool.map(install, [h.name for h in hosts])
    for host in hosts:
        result = results[host.name]
        if not result.ok or result.value is None:
            raise StepFailed("install the previous units", host.name, result.error or "failed")
        changed[host.name] = result.value
    run.done.add("forgotten", [h.name for h in hosts])
    for host in hosts:
        for unit in target.engine_units.get(host.name, ()):
            control = engine(ctx, run, host, f"start rank {host.rank} ({unit})")
            run.log.note(f"starting {unit} on {host.name} (rank {host.rank})", node=host.name)
            run.done.add("started", [host.name], **started_record(unit, control.start(unit)))
    head = min(hosts, key=lambda h: h.rank)
    control = engine(ctx, run, head, "readiness of the previous release")
    deadline = time.monotonic() + run.inv.serving.startup_timeout
    while True:
        still_up(ctx, run, hosts, "readiness of the previous release", target=target)
        answer = control.probe(target.release_id, stream=True)
        if answer.ready:
            break
        if time.monotonic() > deadline:
            raise control.fail(f"not ready within {run.inv.serving.startup_timeout}s: "
                               f"{answer.error}")
        control.sleep(POLL_S * 2)
    run.log.note(f"{head.name} serves {target.release_id} again: {answer.completion!r}",
                 node=head.name)
    for host in hosts:
        control = engine(ctx, run, host, "start the node services")
        for unit in target.side_units.get(host.name, ()):
            control.systemctl("restart" if unit in changed[host.name] else "start", unit)


def point_current(ctx: ModuleContext, run: DeployRun, hosts: list[Host],
                  back: Optional[str]) -> None:
    """`current` names the restored release on every node (none if there was none)."""
    def one(conn: "Remote") -> None:
        host = run.inv.host(conn.name)
        ops = run.ops(host, conn)
        if back is not None:
            ops.switch(back)
            units = existing_target(run.inv, run.states, back, run.members).units(host.name)
            conn.run(["systemctl", "enable", "--quiet", *units], become=ctx.become)
        elif host.name in run.committed:
            ops.unset_current()

    results = ctx.pool.map(one, [h.name for h in hosts])
    for host in hosts:
        if not results[host.name].ok:
            raise StepFailed("point current back", host.name,
                             results[host.name].error or "failed")


def record_failure(ctx: ModuleContext, run: DeployRun, release_id: str) -> None:
    """Mark the release failed and record why, on every node that answers (the others'
    history says it) — except the serving groups that switched to it and kept it (earlier
    batches of a rollout, which passed their gates)."""
    outcome = run.outcome
    event = {"event": "failed", "release": release_id, "by": run.by, "time": now(),
             "step": outcome.failed_step, "node": outcome.failed_node,
             "group": outcome.failed_group if run.inv.replicated else None,
             "reason": (outcome.reason or "")[:300], "rolled_back_to": outcome.rolled_back_to}
    keeping = set(outcome.switched_groups)

    def one(conn: "Remote") -> None:
        ops = run.ops(run.inv.host(conn.name), conn)
        ops.mark(release_id, "failed")
        ops.history(event)

    ctx.pool.map(one, [h.name for h in run.members if h.serving_group not in keeping])


def read_currents(ctx: ModuleContext, run: DeployRun) -> dict[str, Optional[str]]:
    """Each node's `current` now (for a truthful report after a failed restore)."""
    def one(conn: "Remote") -> Optional[str]:
        try:
            return run.ops(run.inv.host(conn.name), conn).state(ALL_UNITS).current
        except AscendctlError:
            return "unreachable"

    results = ctx.pool.map(one, [h.name for h in run.members])
    return {name: (r.value if r.ok else "unreachable") for name, r in results.items()}
