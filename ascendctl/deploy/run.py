"""One deploy's (or rollback's) state: a part of the playbook run's RunState.

The steps of playbooks/deploy.yaml are separate tasks; what one learns the next needs:
each node's releases and units (`release_facts`), the release this run switches to
(planned once), and what the switch did — which hosts it restarts (decided once, by
`engine_stop`), which it stopped, each started unit's PID and restart count (the readiness
gate's baseline), each host's `current` before the commit (for the rescue) — read from
its append-only log, `done` (ascendctl/deploy/switchlog.py). The order the steps hand
these over is declared by each step (ascendctl/deploy/handoffs.py). A module reaches it
with `DeployRun.of(ctx)`; `ascendctl deploy` puts one in before the run (with its
options) and reads `outcome` afterwards. Nothing here is global.
"""

from __future__ import annotations

import getpass
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ascendctl.deploy.lock import ClusterLock
from ascendctl.deploy.nodeops import ForceUnlock, NodeOps
from ascendctl.deploy.nodestate import LockHolder, NodeState
from ascendctl.deploy.release import ENGINE_UNITS, SIDE_UNITS, ReleasePlan, plan_release, weights_digest
from ascendctl.deploy.switchlog import Subjects, SwitchLog
from ascendctl.engine.kinds import identity_from_record, kind_of
from ascendctl.engine.present import plan_engine
from ascendctl.errors import AscendctlError
from ascendctl.playbook.modules import ModuleContext, ModuleError
from ascendctl.render.secrets import resolve_secrets
from ascendctl.weights.plan import plan_for_inventory

if TYPE_CHECKING:
    from ascendctl.engine.identity import EngineIdentity
    from ascendctl.engine.present import EnginePlan
    from ascendctl.inventory import Host, Inventory
    from ascendctl.playbook.state import RunState
    from ascendctl.transport.remote import Remote
    from ascendctl.weights.plan import WeightsPlan


@dataclass
class DeployOptions:
    force_unlock: ForceUnlock = ForceUnlock.NO
    show_progress: bool = True
    on_event: Optional[Callable[[str], None]] = None


@dataclass
class Outcome:
    """What the command reports at the end (filled in by the steps)."""

    release_id: Optional[str] = None
    previous: Optional[str] = None
    changed: bool = False                 # engines were switched to the release
    engines_touched: bool = False         # some engine was stopped by this run
    failed_step: Optional[str] = None
    failed_node: Optional[str] = None
    reason: Optional[str] = None
    rolled_back_to: Optional[str] = None
    rollback_failed: Optional[str] = None
    completion: Optional[str] = None
    lock_holder: Optional[LockHolder] = None    # the lock was refused: held by
    lock_lost: Optional[str] = None             # we held the lock and lost it
    lock_broken: Optional[LockHolder] = None    # our --force-unlock removed this holder
    currents: dict[str, Optional[str]] = field(default_factory=dict)  # after a failure
    failed_group: Optional[str] = None          # the serving group the failure was in
    switched_groups: list[str] = field(default_factory=list)   # committed on the release
    restored_groups: list[str] = field(default_factory=list)   # back on their previous one
    group_previous: dict[str, Optional[str]] = field(default_factory=dict)
    replicated: bool = False                    # the inventory has several serving groups

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EventLog:
    """Progress lines of the switch (shown as `·` lines on a terminal)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    on_event: Optional[Callable[[str], None]] = None

    def note(self, message: str, node: Optional[str] = None) -> None:
        self.events.append({"t": round(time.time(), 3), "msg": message, "node": node})
        if self.on_event:
            self.on_event(message)

    def sayer(self, node: str) -> Callable[..., None]:
        """`say(message, node=NODE)`: the progress callback of one node's work (a gate's)."""
        def say(message: str, node: str = node) -> None:
            self.note(message, node=node)
        return say


@dataclass(frozen=True)
class SwitchTarget:
    """The release a switch starts: its id and each node's units in start order."""

    release_id: str
    engine_units: dict[str, tuple[str, ...]]
    side_units: dict[str, tuple[str, ...]]

    def units(self, node: str) -> tuple[str, ...]:
        return self.engine_units.get(node, ()) + self.side_units.get(node, ())


class DeployRun:
    def __init__(self, inv: "Inventory", options: DeployOptions | None = None):
        self.inv = inv
        self.options = options or DeployOptions()
        self.by = f"{getpass.getuser()}@{socket.gethostname()}"
        self.states: dict[str, NodeState] = {}
        self.outcome = Outcome()
        self.log = EventLog(on_event=self.options.on_event)
        self.lock = ClusterLock(self.by, str(inv.path))
        self.wanted: Optional[str] = None       # None: the release the inventory renders
        self.done = SwitchLog()                 # what the switch did, in order
        self.group_previous: dict[str, Optional[str]] = {}   # group → what its head served
        # groups with a node in maintenance: skipped, and kept out of the balancer
        self.in_maintenance: frozenset[str] = frozenset()
        # release → its measured load envelope (slo.promotion; None: none stored)
        self.envelopes: dict[str, Optional[int]] = {}
        self.promoted: dict[str, str] = {}      # release → the group whose gates passed
        self.outcome.replicated = inv.replicated
        self._run_state: Optional["RunState"] = None
        self._secrets: Optional[dict[str, str]] = None
        self._weights_plan: Optional["WeightsPlan"] = None
        self._weights_planned = False
        self._plan: Optional[ReleasePlan] = None
        self._engine_plan: Optional["EnginePlan"] = None
        self._target: Optional[SwitchTarget] = None
        self._lock = threading.RLock()

    # -- what the switch did, read from its log ----------------------------------------------

    restarting = Subjects("restart")        # hosts whose engines this run switches
    touched = Subjects("stopped")           # hosts whose engines this run stopped
    not_serving = Subjects("not_serving")   # groups whose restore failed (kept out)
    settled = Subjects("settled")           # hosts whose rollout batch is finished

    @property
    def committed(self) -> dict[str, Optional[str]]:
        """Host → what its `current` pointed at before this run committed it."""
        return self.done.committed()

    @property
    def balancer_out(self) -> frozenset[str]:
        """Groups this run took out of the balancer and has not put back."""
        return self.done.out_of_balancer()

    @classmethod
    def of(cls, ctx: ModuleContext) -> "DeployRun":
        """The run's DeployRun (a default one for `ascendctl play deploy.yaml`)."""
        run = ctx.run_state.part(cls, lambda: cls(ctx.inventory))
        run._run_state = ctx.run_state
        return run

    # -- nodes -------------------------------------------------------------------------

    def ops(self, host: "Host", conn: "Remote") -> NodeOps:
        return NodeOps.for_host(self.inv, host, conn)

    def hosts(self, names: Iterable[str]) -> list["Host"]:
        """The inventory's hosts among `names` (a play's hosts), in rank order."""
        wanted = set(names)
        return [h for h in self.inv.hosts if h.name in wanted]

    def groups_of(self, hosts: Iterable["Host"]) -> dict[str, list["Host"]]:
        """HOSTS by serving group (inventory order), each group's in rank order."""
        out: dict[str, list["Host"]] = {}
        names = {h.name for h in hosts}
        for group in self.inv.serving_groups:
            members = [self.inv.host(n) for n in group.hosts if n in names]
            if members:
                out[group.name] = members
        return out

    def restarting_hosts(self, play_hosts: Iterable[str]) -> list["Host"]:
        """The hosts among PLAY_HOSTS whose engines this run switches, in rank order."""
        return [h for h in self.hosts(play_hosts) if h.name in self.restarting]

    def restarted_groups(self, play_hosts: Iterable[str]) -> dict[str, list["Host"]]:
        """`restarting_hosts` by serving group (what a gate after the switch judges)."""
        return self.groups_of(self.restarting_hosts(play_hosts))

    def group_head(self, group: str) -> "Host":
        return self.inv.host(self.inv.group(group).head)

    def serving_release(self, group: str) -> Optional[str]:
        """What GROUP's head serves now, as far as this run knows (it may have switched
        or restored the group since the nodes were read)."""
        if group in self.outcome.switched_groups:
            return self.target().release_id
        if group in self.outcome.restored_groups:
            return self.previous_of(group)
        return self.state(self.group_head(group)).current

    def previous_of(self, group: str) -> Optional[str]:
        """The release GROUP served before this run (its head's `current`)."""
        return self.group_previous.get(group, self.outcome.previous)

    def state(self, host: "Host") -> NodeState:
        try:
            return self.states[host.name]
        except KeyError:
            raise ModuleError(f"the state of {host.name} was not read (run `release_facts` "
                              "on every host first)") from None

    @property
    def members(self) -> list["Host"]:
        """The hosts this run works on: every host but those of groups in maintenance."""
        return [h for h in self.inv.hosts if h.serving_group not in self.in_maintenance]

    @property
    def anchor(self) -> "Host":
        """The head this run keeps its lock and bookkeeping on: the cluster's head, or
        while its group is in maintenance, the first head of a group in the run."""
        return next((h for h in self.inv.heads if h.serving_group not in self.in_maintenance),
                    self.inv.head)

    def current_release(self) -> Optional[str]:
        """The release the cluster serves now (the anchor's `current`)."""
        state = self.states.get(self.anchor.name)
        return state.current if state else None

    # -- computed once -----------------------------------------------------------------

    def secrets(self) -> dict[str, str]:
        with self._lock:
            if self._secrets is None:
                self._secrets = resolve_secrets(self.inv)
            return self._secrets

    def weights_plan(self) -> Optional["WeightsPlan"]:
        with self._lock:
            if not self._weights_planned and self.inv.model.source is not None:
                self._weights_plan = plan_for_inventory(self.inv)
            self._weights_planned = True
            return self._weights_plan

    def engine_plan(self, pool: Any = None) -> "EnginePlan":
        """The engine the inventory's release runs (its identity goes into the release
        id) and what has to travel. Read from the archive or wheelhouse on this machine
        (hashes cached by path, size and mtime, as for the weights); a container engine
        without an archive asks the nodes (`release_facts` passes its pool)."""
        with self._lock:
            if self._engine_plan is None:
                if kind_of(self.inv.engine).identity_needs_nodes(self.inv.engine) \
                        and pool is None:
                    raise AscendctlError("internal: the engine's image ID must be read from "
                                         "the nodes (run `release_facts` first)")
                self._engine_plan = plan_engine(self.inv, pool)
            return self._engine_plan

    def target_engine(self) -> Optional["EngineIdentity"]:
        """The engine of the release this run switches to: the inventory's (deploy), or
        the one the chosen release recorded (rollback; None for a host engine)."""
        if self.wanted is None:
            return self.engine_plan().identity
        release = self.state(self.anchor).release(self.wanted)
        return identity_from_record((release.summary.get("engine") if release else None) or {})

    def release(self) -> ReleasePlan:
        """The release this inventory renders (needs every node's state for its NIC)."""
        with self._lock:
            if self._plan is None:
                self._plan = self._plan_release()
            return self._plan

    def _plan_release(self) -> ReleasePlan:
        if not self.states:
            raise AscendctlError("internal: release planned before node states were read")
        out = [h.name for h in self.inv.hosts if h.name not in self.states
               and (h.nic is None or h.device_ips is None)]
        if out:
            raise AscendctlError(f"{', '.join(out)} in maintenance: the release needs their "
                                 f"`nic` and `device_ips`, which only the node can say; set "
                                 f"them in {self.inv.path}, or `ascendctl node undrain` first")
        nics = {h.name: self.state(h).nic for h in self.inv.hosts if h.nic is None}
        missing = [name for name, nic in nics.items() if not nic]
        if missing:
            raise AscendctlError(f"no NIC carries the `ip` of {', '.join(missing)}: set `nic` "
                                 f"in {self.inv.path} or fix the address")
        device_ips = {h.name: list(self.state(h).device_ips) for h in self.inv.hosts
                      if h.device_ips is None}
        plan = self.weights_plan()
        digest = weights_digest(
            {n.name: [(f.path, f.entry.sha256) for f in n.files] for n in plan.nodes}
            if plan is not None else {"path": [(self.inv.model.path or "", "")]})
        return plan_release(self.inv, secrets=self.secrets(),
                            nics={k: v for k, v in nics.items() if v} or None,
                            device_ips=device_ips or None, weights_digest=digest,
                            engine=self.engine_plan().identity)

    def target(self) -> SwitchTarget:
        """What this run switches to: the new release (deploy) or `wanted` (rollback)."""
        with self._lock:
            if self._target is None:
                if self.wanted is None:
                    plan = self.release()
                    self._target = SwitchTarget(plan.release_id, plan.engine_units,
                                                plan.side_units)
                else:
                    self._target = existing_target(self.inv, self.states, self.wanted,
                                                   self.members)
                self.outcome.release_id = self._target.release_id
            return self._target

    # -- the switch --------------------------------------------------------------------

    def already_serving(self, hosts: Iterable["Host"]) -> bool:
        """Every host is on the target with its units installed as the release has them
        and running: nothing to restart."""
        target = self.target()
        plan = self.release() if self.wanted is None else None
        for host in hosts:
            state = self.state(host)
            if state.current != target.release_id:
                return False
            for unit in target.units(host.name):
                unit_state = state.unit(unit)
                if not unit_state.running:
                    return False
                if plan is not None:
                    wanted = next(f for f in plan.files[host.name] if f.path == f"units/{unit}")
                    if unit_state.installed_sha != hashlib.sha256(wanted.content).hexdigest():
                        return False
        return True

    def require_no_failure(self, ctx: ModuleContext) -> None:
        """Refuse to act on a group after a failure earlier in the run (a play without
        any_errors_fatal may have let the other hosts go on): the rescue decides then."""
        failure = ctx.run_state.failure
        if failure is not None:
            raise ModuleError(f"not going on: {failure.task!r} failed on {failure.host} "
                              "earlier in this run")

    def template_vars(self) -> dict[str, Any]:
        """`release.id`, `release.previous`, `release.restart` for the playbook's tasks
        (e.g. `when: release.restart` on a task inserted before the start)."""
        target = self._target
        batch = self._run_state.rolling if self._run_state is not None else None
        scope = set(batch.hosts) if batch is not None else None
        restarting = self.restarting if scope is None else self.restarting & scope
        previous = self.previous_of(batch.groups[0]) if batch is not None \
            else self.outcome.previous
        return {"release": {"id": target.release_id if target else None,
                            "previous": previous, "restart": bool(restarting)}}

    def close(self) -> None:
        self.lock.close()


def existing_target(inv: "Inventory", states: Mapping[str, NodeState],
                    release_id: str, members: Optional[list["Host"]] = None) -> SwitchTarget:
    """An existing release as a switch target (its units, as each node of MEMBERS has
    them; default every host)."""
    engine: dict[str, tuple[str, ...]] = {}
    side: dict[str, tuple[str, ...]] = {}
    for host in members if members is not None else inv.hosts:
        state = states.get(host.name)
        release = state.release(release_id) if state else None
        if release is None:
            raise ModuleError(f"release {release_id} is not on {host.name} (pruned or never "
                              "deployed there); see `ascendctl history`")
        engine[host.name] = tuple(u for u in ENGINE_UNITS if u in release.units)
        side[host.name] = tuple(u for u in SIDE_UNITS if u in release.units)
    return SwitchTarget(release_id, engine, side)


def previous_good_release(inv: "Inventory", states: Mapping[str, NodeState],
                          members: Optional[list["Host"]] = None) -> Optional[str]:
    """The newest release deployed before the current one that did not fail and is still
    on every node (of MEMBERS: the run's hosts; default every host)."""
    hosts = members if members is not None else list(inv.hosts)
    head_state = states[hosts[0].name] if members is not None else states[inv.head.name]
    on_every_node = set.intersection(*[
        {r.id for r in states[h.name].releases if r.status != "failed"} for h in hosts])
    for event in reversed(head_state.history):
        release = event.get("release")
        if event.get("event") in ("deployed", "rollback") and release != head_state.current \
                and release in on_every_node:
            return str(release)
    return None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
