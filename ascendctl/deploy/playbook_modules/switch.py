"""The switch, one step per module: stop the old engines, install the units, start each
rank, gate on readiness, warm up, start the node services.

`engine_stop` decides, from the nodes' state, whether the hosts of its play restart at
all; every later step acts only on those hosts, so a deploy that finds everything in place
reports ok at every step and restarts nothing. Every step refuses to act after a failure
earlier in the run (then the rescue play decides), and the stop checks that this run
still holds the deploy lock before it touches anything.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from ascendctl.deploy.handoffs import (
    DEPLOY_LOCK, ENGINES_READY, ENGINES_STARTED, RELEASE_ON_NODES, RESTART_DECIDED,
    UNITS_INSTALLED,
)
from ascendctl.deploy.engines import POLL_S, ProbeAnswer, StepFailed
from ascendctl.deploy.lock import LockLost
from ascendctl.deploy.nodestate import UnitState
from ascendctl.deploy.playbook_modules.common import DeployStep, engine, group_result
from ascendctl.deploy.release import ENGINE_UNITS
from ascendctl.deploy.run import DeployRun, SwitchTarget
from ascendctl.deploy.switchlog import started_record
from ascendctl.inventory import Host
from ascendctl.playbook.modules import (
    ModuleContext, ModuleError, ModuleResult, register_module,
)

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote


@register_module("engine_stop")
class EngineStop(DeployStep):
    """Stop the engines of the play's hosts (followers first, then the head) if they do not
    already serve this run's release with its unit files; otherwise touch nothing."""

    needs = (DEPLOY_LOCK, RELEASE_ON_NODES)
    provides = (RESTART_DECIDED,)

    runs_on = "controller"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        hosts = run.hosts(ctx.play_hosts)
        target = run.target()
        names = [h.name for h in hosts]
        if run.already_serving(hosts):
            return ModuleResult(msg=f"{target.release_id} already serves on "
                                f"{', '.join(names)}: nothing stopped")
        run.done.add("restart", names)
        running = {h.name: tuple(u for u in ENGINE_UNITS if run.state(h).unit(u).loaded)
                   for h in hosts}
        what = ", ".join(f"{n}: {' '.join(u) or '-'}" for n, u in running.items())
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would stop {what} and start "
                                f"{target.release_id} in rank order")
        try:
            run.lock.verify()
        except LockLost as err:
            raise ModuleError(f"{err}: stopping before touching the engines") from None
        run.done.add("stopped", names)
        run.outcome.engines_touched = True
        done: dict[str, ModuleResult] = {}
        try:
            for host in reversed(hosts):
                control = engine(ctx, run, host, "stop the old engines")
                for unit in reversed(running[host.name]):
                    run.log.note(f"stopping {unit} on {host.name}", node=host.name)
                    control.systemctl("stop", unit)
                done[host.name] = ModuleResult(changed=bool(running[host.name]), msg=(
                    f"stopped {' '.join(running[host.name])}" if running[host.name]
                    else "no engine installed"))
        except StepFailed as failure:
            return group_result(names, done, failure, msg="")
        return group_result(names, done, None, msg=f"stopped {what}")


@register_module("release_units")
class ReleaseUnits(DeployStep):
    """Install the release's unit files into /etc/systemd/system (daemon-reload if any
    changed), on the hosts that restart."""

    needs = (RESTART_DECIDED,)
    provides = (UNITS_INSTALLED,)

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        if ctx.host.name not in run.restarting:
            return ModuleResult(msg="no restart: unit files left as they are")
        target = run.target()
        units = target.units(ctx.host.name)
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would install {' '.join(units)} of "
                                f"{target.release_id}")
        changed = run.ops(ctx.host, ctx.conn).install_units(target.release_id, units)
        run.done.add("units", [ctx.host.name], files=list(changed))
        return ModuleResult(changed=bool(changed), msg=(f"installed {' '.join(changed)}"
                                                        if changed else "unit files unchanged"))


@register_module("engine_start")
class EngineStart(DeployStep):
    """Start this host's engine units (in order) and wait until each is up and stays up,
    within the per-rank budget the rendered HCCL_CONNECT_TIMEOUT was sized for. Put the
    head in one play and the followers in a play with `order: rank`."""

    needs = (UNITS_INSTALLED,)
    provides = (ENGINES_STARTED,)

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        target = run.target()
        units = target.engine_units.get(ctx.host.name, ())
        if ctx.host.name not in run.restarting:
            return ModuleResult(msg=f"{target.release_id} already running")
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would start {' '.join(units)} "
                                f"(rank {ctx.host.rank})")
        started: dict[str, UnitState] = {}
        for unit in units:
            control = engine(ctx, run, ctx.host, f"start rank {ctx.host.rank} ({unit})")
            run.log.note(f"starting {unit} on {ctx.host.name} (rank {ctx.host.rank})",
                         node=ctx.host.name)
            try:
                started[unit] = control.start(unit)
            except StepFailed as failure:
                return ModuleResult(failed=True, msg=failure.reason)
            run.done.add("started", [ctx.host.name], **started_record(unit, started[unit]))
        pids = ", ".join(f"{u} PID {s.main_pid}" for u, s in started.items())
        return ModuleResult(changed=True, msg=f"started {pids}")


def still_up(ctx: ModuleContext, run: DeployRun, hosts: list[Host], step: str, *,
             target: Optional[SwitchTarget] = None) -> None:
    """Every started engine unit of `target` (default: this run's release) runs the
    process it was started with (checked on the hosts in parallel)."""
    target = target or run.target()

    def one(conn: "Remote") -> Optional[StepFailed]:
        host = run.inv.host(conn.name)
        control = engine(ctx, run, host, step)
        try:
            for unit in target.engine_units.get(host.name, ()):
                control.check_still_up(unit, run.done.started(host.name).get(unit))
        except StepFailed as failure:
            return failure
        return None

    results = ctx.pool.map(one, [h.name for h in hosts])
    for host in hosts:
        result = results[host.name]
        if not result.ok:
            raise StepFailed(step, host.name, result.error or "failed")
        if result.value is not None:
            raise result.value


@register_module("engine_ready")
class EngineReady(DeployStep):
    """Readiness gate: poll until each restarted serving group's head lists the model on
    /v1/models and a completion answers (within serving.startup_timeout), while every
    restarted rank stays up."""

    needs = (ENGINES_STARTED,)
    provides = (ENGINES_READY,)

    runs_on = "controller"
    step = "readiness"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        hosts = run.restarting_hosts(ctx.play_hosts)
        names = list(ctx.play_hosts)
        if not hosts:
            return ModuleResult(msg="nothing was restarted: the serving engines passed this "
                                "gate when they started")
        if ctx.check:
            return ModuleResult(msg="would wait until the head serves")
        served = []
        try:
            for members in run.groups_of(hosts).values():
                served.append(self._ready(ctx, run, members))
        except StepFailed as failure:
            return group_result(names, {}, failure, msg="")
        return ModuleResult(msg="; ".join(served))

    def _ready(self, ctx: ModuleContext, run: DeployRun, hosts: list[Host]) -> str:
        head = hosts[0]
        control = engine(ctx, run, head, self.step)
        timeout = ctx.inventory.serving.startup_timeout
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            still_up(ctx, run, hosts, self.step)
            answer = control.probe(run.target().release_id, stream=False)
            if answer.ready:
                break
            last = answer.error or last
            if time.monotonic() > deadline:
                raise control.fail(f"not ready within {timeout}s: {last}")
            control.sleep(POLL_S * 2)
        run.log.note(f"{head.name} serves: {answer.completion!r}", node=head.name)
        return (f"{head.name} serves (/v1/models and a completion in "
                f"{answer.seconds or 0:.1f}s): {answer.completion!r}")


@register_module("engine_warmup")
class EngineWarmup(DeployStep):
    """Warm-up: one more completion and a streamed one through the API key on each
    restarted group's head; every restarted rank still runs the process it was started
    with."""

    needs = (ENGINES_READY,)

    runs_on = "controller"
    step = "warm-up"

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        hosts = run.restarting_hosts(ctx.play_hosts)
        if not hosts:
            return ModuleResult(msg="nothing was restarted")
        if ctx.check:
            return ModuleResult(msg="would send a streamed completion")
        try:
            for members in run.groups_of(hosts).values():
                control = engine(ctx, run, members[0], self.step)
                answer: ProbeAnswer = control.probe(run.target().release_id, stream=True)
                if not answer.ready:
                    raise control.fail(f"{answer.step}: {answer.error}")
                still_up(ctx, run, members, self.step)
        except StepFailed as failure:
            return group_result(list(ctx.play_hosts), {}, failure, msg="")
        run.outcome.completion = answer.completion
        return ModuleResult(msg=f"streamed and plain completions answer: "
                            f"{answer.completion!r}")


@register_module("node_services")
class NodeServices(DeployStep):
    """Start the exporter and the watchdog of the release (restart those whose unit file
    changed) and enable them, on the hosts that restarted."""

    needs = (UNITS_INSTALLED,)

    def act(self, ctx: ModuleContext, run: DeployRun) -> ModuleResult:
        units = run.target().side_units.get(ctx.host.name, ())
        if ctx.host.name not in run.restarting or not units:
            return ModuleResult(msg="running" if units else "none in this release")
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would start {' '.join(units)}")
        control = engine(ctx, run, ctx.host, "start the node services")
        changed = run.done.changed_units(ctx.host.name)
        try:
            for unit in units:
                control.systemctl("restart" if unit in changed else "start", unit)
        except StepFailed as failure:
            return ModuleResult(failed=True, msg=failure.reason)
        return ModuleResult(changed=True, msg=f"started {' '.join(units)}")
