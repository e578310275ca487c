"""Run a playbook: plays in order, each task on all its hosts before the next task.

Hosts are reached through one pool for the whole run (one connection per host).
Within a batch every task runs on the batch's hosts in parallel (at most --forks at
once); `order: rank` makes batches of one host in rank order, `serial: N` batches of
N. A host that fails (or cannot be reached) leaves the rest of the playbook; the others
go on. Handlers run at the end of each batch, for the hosts that notified them.

After a failure that stops the run (any_errors_fatal, or a stop requested through the
run state), only `rescue: true` plays (when something failed) and `always: true` plays
still run.

A `rolling:` block repeats its plays once per batch of serving groups (at most
`max_unavailable` groups per batch, in inventory order): each batch's plays act only on
the batch's hosts; its rescue plays run when a play of the batch failed, its always plays
after every batch it started. A failed batch ends the rollout (later batches never start)
and stops the run; a failure its own rescue plays handled does not run the playbook's
outer rescue plays again. The run's state (ascendctl/playbook/state.py) is handed to every module as
`ctx.run_state`; a run_once task runs in the runner's own thread, so the module can fan
out over the pool (`ctx.pool.map`) within --forks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ascendctl.errors import AscendctlError, InputError
import dataclasses

from ascendctl.playbook.loader import validate_args
from ascendctl.playbook.model import Play, Playbook, Rolling, Task
from ascendctl.playbook.modules import (
    MODULES, Module, ModuleContext, ModuleError, ModuleResult, load_modules,
)
from ascendctl.playbook.results import (
    PlayReport, RunReport, TaskHostResult, TaskReport, TaskStatus,
)
from ascendctl.playbook.state import FailedTask, RollingBatch, RunState
from ascendctl.playbook.templating import Templar, TemplateError
from ascendctl.transport import SshPool
from ascendctl.transport.errors import ConnectError

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.playbook.reporting import Reporter
    from ascendctl.transport import HostPool


@dataclass
class RunOptions:
    check: bool = False
    diff: bool = False
    limit: Optional[str] = None
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    forks: int = 16
    extra_vars: dict[str, Any] = field(default_factory=dict)
    yes: bool = False
    # Asks the operator a yes/no question; None = nobody to ask (non-interactive).
    confirm: Optional[Callable[[str], bool]] = None
    connect_timeout: Optional[float] = None


def task_selected(task: Task, play: Play, options: RunOptions) -> bool:
    """Ansible's tag rules: --tags picks, --skip-tags drops, `always` and `never` are special."""
    tags = task.tags | play.tags
    if tags & options.skip_tags:
        return False
    if "never" in tags and not (options.tags & tags):
        return False
    if not options.tags or "all" in options.tags:
        return True
    if "always" in tags:
        return True
    return bool(options.tags & tags)


def inventory_vars(inventory: "Inventory", host: "Host") -> dict[str, Any]:
    """The variables a play sees for a host: the inventory sections and the host itself."""
    sections = {name: getattr(inventory, name).model_dump(mode="json")
                for name in ("cluster", "model", "serving", "versions", "deploy", "slo")}
    host_info = {
        "name": host.name, "address": host.address, "rank": host.rank, "ip": host.ip,
        "nic": host.nic, "device_ips": list(host.device_ips) if host.device_ips else None,
        "groups": list(host.groups), "super_pod_id": host.super_pod_id,
        "super_device_ids": list(host.super_device_ids) if host.super_device_ids else None,
        "env": dict(host.env), "custom": dict(host.custom), "is_head": host.is_head,
        "ssh_user": host.ssh.user,
    }
    return {
        **sections, "host": host_info, "inventory_hostname": host.name,
        "ansible_host": host.address, "rank": host.rank, "group_names": list(host.groups),
        "groups": {g: list(m) for g, m in inventory.groups.items()},
        "custom": {**inventory.custom, **host.custom},
        "inventory_file": str(inventory.path),
    }


@dataclass
class PlanItem:
    """One play to run with its hosts; in a rolling block, the batch it belongs to."""

    play: Play
    hosts: tuple["Host", ...]
    batch: Optional[RollingBatch] = None
    block: int = -1                 # index of the rolling block in the playbook


@dataclass
class HostState:
    host: "Host"
    base: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)   # registered + set_fact (whole run)
    play_vars: dict[str, Any] = field(default_factory=dict)   # as written (rendered on use)
    failed: bool = False
    unreachable: bool = False
    notified: set[str] = field(default_factory=set)

    @property
    def active(self) -> bool:
        return not (self.failed or self.unreachable)


class HostVars(Mapping[str, Mapping[str, Any]]):
    """`hostvars[name]`: another host's variables (inventory, play vars, registered)."""

    def __init__(self, runner: "PlaybookRunner"):
        self._runner = runner

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        state = self._runner.states.get(name)
        if state is None:
            raise KeyError(name)
        return self._runner.host_variables(state)

    def __iter__(self) -> Iterator[str]:
        return iter(self._runner.states)

    def __len__(self) -> int:
        return len(self._runner.states)


class PlaybookRunner:
    def __init__(self, playbook: Playbook, inventory: "Inventory", options: RunOptions,
                 reporter: "Reporter", templar: Templar,
                 pool_factory: Callable[[Sequence["Host"]], "HostPool[Any]"] | None = None,
                 run_state: RunState | None = None):
        self.playbook = playbook
        self.inventory = inventory
        self.options = options
        self.reporter = reporter
        self.templar = templar
        self._pool_factory = pool_factory
        self.run_state = run_state if run_state is not None else RunState()
        self.pool: Optional["HostPool[Any]"] = None
        self.states: dict[str, HostState] = {}
        self.hostvars = HostVars(self)
        self.report = RunReport(playbook=str(playbook.path), inventory=str(inventory.path),
                                check=options.check)
        self._play_hosts: list[str] = []

    # -- planning (no host contacted) --------------------------------------------------------

    def plan(self, *, for_run: bool = True) -> list[tuple[Play, tuple["Host", ...]]]:
        """Each play with its hosts (pattern ∩ --limit), rolling blocks expanded into one
        copy of their plays per batch. Raises InputError before any SSH.

        for_run: also refuse plays that need a confirmation nobody can give."""
        return [(item.play, item.hosts) for item in self.plan_items(for_run=for_run)]

    def plan_items(self, *, for_run: bool = True) -> list[PlanItem]:
        load_modules(plugins=False)
        limit = None
        if self.options.limit:
            limit = {h.name for h in self.inventory.select(self.options.limit)}
        planned: list[PlanItem] = []
        for index, item in enumerate(self.playbook.plays):
            if isinstance(item, Rolling):
                planned += self._plan_rolling(item, index, limit)
            else:
                planned.append(PlanItem(item, self._select(item, limit)))
        interactive = self.options.confirm is not None or not for_run
        for entry in planned:
            play = entry.play
            if play.confirm and entry.hosts and not (self.options.yes or self.options.check
                                                     or interactive):
                raise InputError(f"play {play.name!r} asks for confirmation ({play.confirm}); "
                                 "pass --yes to run it unattended", file=play.where.file,
                                 line=play.where.line, field="confirm")
        return planned

    def _select(self, play: Play, limit: Optional[set[str]],
                scope: Optional[set[str]] = None) -> tuple["Host", ...]:
        try:
            hosts = self.inventory.select(play.hosts)
        except InputError as err:
            raise InputError(f"hosts: {err}", file=play.where.file,
                             line=play.where.line) from None
        if limit is not None:
            hosts = tuple(h for h in hosts if h.name in limit)
        if scope is not None:
            hosts = tuple(h for h in hosts if h.name in scope)
        return hosts

    def _plan_rolling(self, block: Rolling, index: int,
                      limit: Optional[set[str]]) -> list[PlanItem]:
        """The block's plays once per batch of serving groups."""
        try:
            wanted = {h.name for h in self.inventory.select(block.hosts)}
        except InputError as err:
            raise InputError(f"hosts: {err}", file=block.where.file,
                             line=block.where.line) from None
        if limit is not None:
            wanted &= limit
        groups = [(g.name, tuple(n for n in g.hosts if n in wanted))
                  for g in self.inventory.serving_groups]
        groups = [(name, hosts) for name, hosts in groups if hosts]
        size = self._max_unavailable(block)
        batches = [groups[i:i + size] for i in range(0, len(groups), size)]
        named = self.inventory.replicated or any(name != "all" for name, _ in groups)
        items: list[PlanItem] = []
        for number, members in enumerate(batches, start=1):
            names = tuple(name for name, _ in members)
            scope = tuple(h for _, hosts in members for h in hosts)
            batch = RollingBatch(
                block=block.name, index=number, count=len(batches), groups=names,
                hosts=scope,
                waiting=tuple(n for b in batches[number:] for n, _ in b),
                done=tuple(n for b in batches[:number - 1] for n, _ in b))
            for play in block.plays:
                copy = dataclasses.replace(
                    play, tags=play.tags | block.tags,
                    name=f"{play.name} [{', '.join(names)}]" if named else play.name)
                items.append(PlanItem(copy, self._select(copy, limit, set(scope)), batch,
                                      index))
        return items

    def _max_unavailable(self, block: Rolling) -> int:
        value: Any = block.max_unavailable
        if isinstance(value, str):
            head = self.inventory.hosts[0]
            context = {**inventory_vars(self.inventory, head), **self.options.extra_vars}
            try:
                value = self.templar.render(value, context)
            except TemplateError as err:
                raise InputError(f"max_unavailable: {err}", file=block.where.file,
                                 line=block.where.line) from None
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"max_unavailable must be a number of serving groups >= 1, got "
                             f"{value!r}", file=block.where.file, line=block.where.line,
                             field="rolling.max_unavailable")
        return value

    # -- running -----------------------------------------------------------------------------

    def run(self) -> RunReport:
        planned = self.plan_items()
        started = time.monotonic()
        all_hosts: dict[str, "Host"] = {}
        for item in planned:
            for host in item.hosts:
                all_hosts[host.name] = host
        for name, host in all_hosts.items():
            self.states[name] = HostState(host=host, base=inventory_vars(self.inventory, host))
        self.pool = self._make_pool(list(all_hosts.values()))
        try:
            stopped = False
            position = 0
            while position < len(planned):
                item = planned[position]
                if item.batch is not None:
                    batch = [i for i in planned[position:] if i.block == item.block
                             and i.batch == item.batch]
                    position += len(batch)
                    if stopped or self._stop_requested():
                        # the rollout ended (or never began): later batches never start
                        stopped = True
                        continue
                    if not self._run_rolling_batch(batch):
                        stopped = True
                    continue
                position += 1
                play, hosts = item.play, item.hosts
                stopped = stopped or self._stop_requested()
                if play.rescue:
                    if not self._rescue_wanted() or self._rescued:
                        continue
                elif stopped and not play.always:
                    continue
                if not self._run_play(play, hosts):
                    stopped = True
        except KeyboardInterrupt:
            self.report.interrupted = True
            self.pool.interrupt()
        finally:
            self.run_state.rolling = None
            self.run_state.close()
            self.report.exec_counts = self.pool.exec_counts()
            self.pool.close()
            self.report.duration = time.monotonic() - started
        self.reporter.run_end(self.report)
        return self.report

    _rescued = False      # a rolling batch's own rescue plays handled the run's failure

    def _run_rolling_batch(self, items: list[PlanItem]) -> bool:
        """One batch of a rolling block; False when it failed (the rollout ends)."""
        batch = items[0].batch
        assert batch is not None
        self.reporter.note(f"ROLLING [{batch.block}] batch {batch.index}/{batch.count}: "
                           f"{', '.join(batch.groups)}"
                           + (f" (then {', '.join(batch.waiting)})" if batch.waiting else ""))
        failure_before = self.run_state.failure
        gone = {h for h in batch.hosts if h in self.states and not self.states[h].active}
        if len(gone) == len(batch.hosts):
            self.reporter.note("no hosts left in this batch")
            return True

        def went_wrong() -> bool:
            return self.run_state.failure is not failure_before or any(
                not self.states[h].active for h in batch.hosts
                if h in self.states and h not in gone)

        failed = False
        self.run_state.rolling = batch
        try:
            for item in items:
                play = item.play
                failed = failed or went_wrong() or self._stop_requested()
                if play.rescue:
                    if not failed or not self._rescue_wanted():
                        continue
                    self._rescued = True
                elif failed and not play.always:
                    continue
                if not self._run_play(play, item.hosts) and not (play.rescue or play.always):
                    failed = True
            failed = failed or went_wrong()
        finally:
            self.run_state.rolling = None
        if failed and not self.report.aborted:
            self.report.aborted = (f"rolling [{batch.block}]: batch {batch.index}/"
                                   f"{batch.count} ({', '.join(batch.groups)}) failed; the "
                                   "rollout stops")
            self.reporter.note(f"stopping: {self.report.aborted}")
        return not failed

    def _stop_requested(self) -> bool:
        """A stop asked for through the run state: note it once as the run's abort."""
        stop = self.run_state.stop_request
        if stop is None:
            return False
        if not self.report.aborted:
            self.report.aborted = f"stopped: {stop.reason}"
            self.reporter.note(f"stopping: {stop.reason}")
        return True

    def _rescue_wanted(self) -> bool:
        """Rescue plays run once something failed, unless the stop request forbids it."""
        stop = self.run_state.stop_request
        if stop is not None and not stop.rescue:
            return False
        return self.run_state.failure is not None or bool(self.report.aborted) \
            or stop is not None

    def _make_pool(self, hosts: list["Host"]) -> "HostPool[Any]":
        if self._pool_factory is not None:
            return self._pool_factory(hosts)

        return SshPool(hosts, forks=self.options.forks,
                       connect_timeout=self.options.connect_timeout)

    def _run_play(self, play: Play, hosts: Sequence["Host"]) -> bool:
        """Run one play; False when the whole run must stop (any_errors_fatal, Ctrl-C)."""
        if play.always or play.rescue:
            for host in hosts:
                self.states[host.name].failed = False  # the report keeps the failure
        active = [h for h in hosts if self.states[h.name].active]
        play_report = PlayReport(name=play.name, hosts=[h.name for h in active],
                                 order=play.order)
        self.report.plays.append(play_report)
        self.reporter.play_start(play, play_report)
        if not active:
            play_report.note = "no hosts matched" if not hosts else "no hosts left"
            self.reporter.note(play_report.note)
            return True
        if play.confirm and not (self.options.yes or self.options.check):
            ask = self.options.confirm
            if ask is None or not ask(f"{play.name}: {play.confirm}"):
                raise AscendctlError(f"play {play.name!r} not confirmed; nothing was done "
                                     "in it")
        tasks = list(play.tasks)
        if play.gather_facts:
            tasks.insert(0, Task(name="gather facts", module="gather_facts", args={},
                                 where=play.where, tags=frozenset({"always"})))
        size = play.batch_size(len(active))
        for start in range(0, len(active), size):
            batch = [h.name for h in active[start:start + size]]
            batch = [n for n in batch if self.states[n].active]
            if not batch:
                continue
            self._play_hosts = [h.name for h in active if self.states[h.name].active]
            for name in batch:
                self.states[name].play_vars = dict(play.vars)
            outcome = self._run_batch(play, batch, tasks, play_report)
            if outcome == "abort":
                return False
            if outcome == "batch_failed":
                # Every host of this batch failed: later batches would fail the same
                # way (a rolling change stops here). Other plays still run.
                play_report.note = "stopped: every host of a batch failed"
                return True
        return True

    def host_variables(self, state: HostState) -> dict[str, Any]:
        """Inventory, play vars (rendered now, in order, like Ansible's lazy vars) and the
        host's registered results and facts."""
        from jinja2 import StrictUndefined

        rendered: dict[str, Any] = {}
        for key, value in state.play_vars.items():
            context = {**state.base, **rendered, **state.facts, **self.options.extra_vars,
                       "hostvars": self.hostvars}
            try:
                rendered[key] = self.templar.render(value, context)
            except TemplateError as err:
                # Fails only where it is used, with the reason.
                rendered[key] = StrictUndefined(hint=f"play variable {key!r}: {err}")
        return {**state.base, **rendered, **state.facts}

    def _run_batch(self, play: Play, batch: list[str], tasks: list[Task],
                   play_report: PlayReport) -> str:
        """"ok", "batch_failed" (no host of the batch left) or "abort" (stop the run)."""
        for task in tasks:
            if not task_selected(task, play, self.options):
                continue
            if not (play.always or play.rescue) and self._stop_requested():
                return "abort"
            names = [n for n in batch if self.states[n].active]
            if not names:
                break
            self._run_step(play, task, names, play_report, handler=False)
            if play.any_errors_fatal and self._step_failed(play_report.tasks[-1]):
                self.report.aborted = f"any_errors_fatal: task {task.name!r} failed"
                self.reporter.note(f"stopping: {self.report.aborted}")
                return "abort"
            if not any(self.states[n].active for n in batch):
                self.reporter.note("no hosts left in this batch")
                return "batch_failed"
        for handler in play.handlers:
            names = [n for n in batch if self.states[n].active and
                     self.states[n].notified & {handler.name, *handler.listen}]
            if names:
                self._run_step(play, handler, names, play_report, handler=True)
        for name in batch:
            self.states[name].notified.clear()
        return "ok"

    @staticmethod
    def _step_failed(task_report: TaskReport) -> bool:
        return any(r.counts_as_failure or r.status is TaskStatus.UNREACHABLE
                   for r in task_report.results.values())

    def _run_step(self, play: Play, task: Task, names: list[str], play_report: PlayReport,
                  *, handler: bool) -> None:
        report = TaskReport(name=task.name, module=task.module, file=task.where.file,
                            line=task.where.line, handler=handler, run_once=task.run_once)
        play_report.tasks.append(report)
        self.reporter.task_start(task, report)
        started = time.monotonic()
        assert self.pool is not None
        if task.run_once:
            results = self._run_once(play, task, names)
        else:
            try:
                host_results = self.pool.map(
                    lambda conn: self.run_task_on_host(play, task, self.states[conn.name]),
                    names)
            except KeyboardInterrupt:
                partial = self.pool.last_results
                for name, res in partial.items():
                    if res.ok and res.value is not None:
                        report.results[name] = res.value
                report.duration = time.monotonic() - started
                self.reporter.task_end(task, report)
                raise
            results = {}
            for name, res in host_results.items():
                if res.ok and res.value is not None:
                    results[name] = res.value
                else:
                    results[name] = TaskHostResult(
                        host=name, status=TaskStatus.UNREACHABLE if res.status.value == "unreachable"
                        else TaskStatus.FAILED, msg=res.error or "failed", error_kind=res.error_kind,
                        duration=res.duration)
        report.results = {n: results[n] for n in names if n in results}
        report.duration = time.monotonic() - started
        self._apply(play, task, report)
        self.reporter.task_end(task, report)

    def _apply(self, play: Play, task: Task, report: TaskReport) -> None:
        """Register results, remember notifications, retire failed hosts, remember the
        run's first failure (main thread only)."""
        for name, res in report.results.items():
            if res.counts_as_failure or res.status is TaskStatus.UNREACHABLE:
                self.run_state.record_failure(FailedTask(
                    play=play.name, task=task.name, host=name, msg=res.msg,
                    where=str(task.where)))
        for name, res in report.results.items():
            state = self.states[name]
            if res.data.get("_facts"):
                state.facts.update(res.data.pop("_facts"))
            if task.register:
                state.facts[task.register] = _registered(res)
            if res.status == "changed" and task.notify:
                state.notified.update(task.notify)
            if res.status == "unreachable":
                state.unreachable = True
            elif res.counts_as_failure:
                state.failed = True

    def _run_once(self, play: Play, task: Task, names: list[str]) -> dict[str, TaskHostResult]:
        first = names[0]
        assert self.pool is not None
        # In this thread, not a worker: the module may fan out over the pool itself.
        res = self.pool.call(first, lambda conn: self.run_task_on_host(
            play, task, self.states[conn.name], once_for=names))
        if not res.ok or res.value is None:
            status = TaskStatus.UNREACHABLE if res.status.value == "unreachable" \
                else TaskStatus.FAILED
            single = TaskHostResult(host=first, status=status, msg=res.error or "failed",
                                    error_kind=res.error_kind, duration=res.duration)
        else:
            single = res.value
        per_host = single.data.pop("_per_host", None)
        results: dict[str, TaskHostResult] = {}
        for name in names:
            if per_host and name in per_host:
                results[name] = per_host[name]
            elif single.status == "unreachable" and name != first:
                # The controller could not reach the host it ran on; the others are fine
                # but cannot go on without this task's result.
                results[name] = TaskHostResult(host=name, status=TaskStatus.FAILED,
                                               msg=f"run_once task failed on {first}: "
                                               f"{single.msg}", duration=single.duration)
            else:
                results[name] = TaskHostResult(
                    host=name, status=single.status, msg=single.msg, data=dict(single.data),
                    diffs=single.diffs if name == first else [],
                    duration=single.duration, attempts=single.attempts,
                    ignored=single.ignored, error_kind=single.error_kind,
                    no_log=single.no_log)
        return results

    # -- one task on one host (worker thread) ------------------------------------------------

    def variables(self, state: HostState, task: Task | None = None) -> dict[str, Any]:
        variables = self.host_variables(state)
        variables.update(self.run_state.template_vars())
        if self.run_state.failure is not None:
            variables["failed_task"] = self.run_state.failure.as_vars()
        if task is not None and task.vars:
            for key, value in task.vars.items():
                variables[key] = self.templar.render(value, variables)
        variables.update(self.options.extra_vars)
        variables["hostvars"] = self.hostvars
        variables["rolling"] = (self.run_state.rolling.as_vars()
                                if self.run_state.rolling is not None else None)
        variables["play_hosts"] = list(self._play_hosts)
        variables["ansible_play_hosts"] = variables["play_hosts"]
        variables["check_mode"] = self.options.check
        variables["playbook_dir"] = str(self.playbook.directory)
        return variables

    def run_task_on_host(self, play: Play, task: Task, state: HostState,
                         once_for: Sequence[str] | None = None) -> TaskHostResult:
        started = time.monotonic()
        name = state.host.name

        def done(status: TaskStatus, msg: str = "", **kwargs: Any) -> TaskHostResult:
            return TaskHostResult(host=name, status=status, msg=msg,
                                  duration=time.monotonic() - started, no_log=task.no_log,
                                  **kwargs)

        module_cls = MODULES.get(task.module)
        if module_cls is None:
            return done(TaskStatus.FAILED, f"no module named {task.module!r}")
        try:
            variables = self.variables(state, task)
            if task.when is not None and not self.templar.truth(task.when, variables):
                return done(TaskStatus.SKIPPED, "condition is false")
        except TemplateError as err:
            return done(TaskStatus.FAILED, str(err))
        check = self.options.check and task.check_mode is not False
        if check and not module_cls.supports_check:
            return done(TaskStatus.SKIPPED, "not run in check mode (add `check_mode: false` to a "
                        "read-only task to run it anyway)")
        attempts = task.attempts
        result = ModuleResult()
        registered: dict[str, Any] = {}
        attempt = 0
        for attempt in range(1, attempts + 1):
            try:
                result = self._invoke(module_cls, play, task, state, variables, check,
                                      once_for)
            except ConnectError as err:
                return done(TaskStatus.UNREACHABLE, err.reason, error_kind=err.kind, attempts=attempt)
            registered = _result_dict(result, attempt)
            try:
                with_result = {**variables, "result": registered}
                if task.register:
                    with_result[task.register] = registered
                if task.changed_when is not None and not result.failed:
                    result.changed = self.templar.truth(task.changed_when, with_result)
                if task.failed_when is not None:
                    result.failed = self.templar.truth(task.failed_when, with_result)
                    if result.failed and not result.msg:
                        result.msg = f"failed_when: {task.failed_when}"
                registered.update(changed=result.changed, failed=result.failed)
                finished = (self.templar.truth(task.until, with_result) if task.until
                            is not None else not result.failed)
            except TemplateError as err:
                return done(TaskStatus.FAILED, str(err), attempts=attempt)
            if finished or attempt == attempts:
                if task.until is not None and not finished:
                    result.failed = True
                    result.msg = (f"until {task.until!r} still false after {attempt} "
                                  f"attempts" + (f" ({result.msg})" if result.msg else ""))
                break
            assert self.pool is not None
            if self.pool.cancel.wait(task.delay):
                return done(TaskStatus.FAILED, "interrupted", attempts=attempt)
        status = _status(result)
        data = dict(registered)
        if result.facts:
            data["_facts"] = result.facts
        if result.per_host is not None:
            data["_per_host"] = {
                host: TaskHostResult(
                    host=host, status=_status(r), msg=r.msg,
                    data=_result_dict(r, attempt), diffs=r.diffs,
                    duration=time.monotonic() - started, attempts=attempt,
                    ignored=r.failed and task.ignore_errors, no_log=task.no_log)
                for host, r in result.per_host.items()}
        return done(status, result.msg, data=data, diffs=result.diffs, attempts=attempt,
                    ignored=result.failed and task.ignore_errors)

    def _invoke(self, module_cls: type[Module], play: Play, task: Task, state: HostState,
                variables: dict[str, Any], check: bool,
                once_for: Sequence[str] | None) -> ModuleResult:
        from pydantic import ValidationError

        try:
            raw = self.templar.render(task.args, variables)
            args = validate_args(module_cls, raw, lambda msg, loc: ModuleError(
                msg + (f" (argument {'.'.join(map(str, loc))})" if loc else "")),
                lenient=False)
            assert self.pool is not None
            pool = self.pool
            ctx = ModuleContext(
                host=state.host, vars=variables, inventory=self.inventory,
                templar=self.templar, check=check, diff=self.options.diff or self.options.check,
                playbook_dir=self.playbook.directory, hostvars=self.hostvars,
                play_hosts=list(once_for or self._play_hosts),
                become=task.become if task.become is not None else play.become,
                timeout=task.timeout, run_state=self.run_state, cancel=pool.cancel,
                _conn_factory=None if module_cls.runs_on == "controller" else pool.conn,
                _pool=pool if task.run_once else None)
            if module_cls.runs_on == "controller":
                ctx._conn_factory = pool.conn if task.run_once else None
            return module_cls().run(ctx, args)
        except ConnectError:
            raise
        except (ModuleError, TemplateError) as err:
            return ModuleResult(failed=True, msg=str(err))
        except ValidationError as err:
            return ModuleResult(failed=True, msg=f"{task.module}: {err.errors()[0]['msg']}")
        except AscendctlError as err:
            return ModuleResult(failed=True, msg=_strip_host(str(err), state.host.name))
        except Exception as err:  # noqa: BLE001 - a module bug fails the task, not the run
            return ModuleResult(failed=True, msg=f"{task.module}: internal error: "
                                f"{type(err).__name__}: {err}")


def _status(result: ModuleResult) -> TaskStatus:
    return TaskStatus.FAILED if result.failed else TaskStatus.SKIPPED if result.skipped \
        else TaskStatus.CHANGED if result.changed else TaskStatus.OK


def _result_dict(result: ModuleResult, attempts: int) -> dict[str, Any]:
    data = dict(result.data)
    data.update(changed=result.changed, failed=result.failed, skipped=result.skipped,
                msg=result.msg, attempts=attempts)
    return data


def _registered(res: TaskHostResult) -> dict[str, Any]:
    data = {k: v for k, v in res.data.items() if not k.startswith("_")}
    data.update(changed=res.status == "changed", failed=res.status == "failed",
                skipped=res.status == "skipped", unreachable=res.status == "unreachable",
                msg=res.msg)
    return data


def _strip_host(message: str, name: str) -> str:
    prefix = f"{name}: "
    return message[len(prefix):] if message.startswith(prefix) else message
