"""One deploy (or rollback) run's shared state, used by the deploy playbook's modules.

The modules of playbooks/deploy.yaml run as separate tasks; they share what was learned
(each node's releases and units, the previous release, the lock token) and what was
computed (secrets, the weights plan, the release) through the context of their inventory.
"""

from __future__ import annotations

import getpass
import secrets as token_source
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ascendctl.deploy.nodeops import NodeOps
from ascendctl.deploy.release import (
    ENGINE_UNITS, SIDE_UNITS, ReleasePlan, plan_release, weights_digest,
)
from ascendctl.deploy.switch import SwitchLog, SwitchTarget
from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit
from ascendctl.inventory import Host, Inventory

LOCK_HEARTBEAT_S = 30.0
LOCK_STALE_S = 900.0


@dataclass
class DeployOptions:
    force_unlock: bool = False
    rollback_to: Optional[str] = None     # rollback: the release to go back to
    show_progress: bool = True
    on_event: Optional[Callable[[str], None]] = None


@dataclass
class Outcome:
    """What the CLI reports at the end (set by the switch and commit steps)."""

    release_id: Optional[str] = None
    previous: Optional[str] = None
    changed: bool = False
    failed_step: Optional[str] = None
    failed_node: Optional[str] = None
    reason: Optional[str] = None
    rolled_back_to: Optional[str] = None
    rollback_failed: Optional[str] = None
    completion: Optional[str] = None
    lock_holder: Optional[dict[str, Any]] = None


class DeployContext:
    _registry: ClassVar[dict[int, "DeployContext"]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, inv: Inventory, options: DeployOptions | None = None):
        self.inv = inv
        self.options = options or DeployOptions()
        self.by = f"{getpass.getuser()}@{socket.gethostname()}"
        self.states: dict[str, dict[str, Any]] = {}
        self.outcome = Outcome()
        self.log = SwitchLog(on_event=self.options.on_event)
        self._secrets: Optional[dict[str, str]] = None
        self._weights_plan: Any = None
        self._plan: Optional[ReleasePlan] = None
        self.lock_token: Optional[str] = None
        self._heartbeat: Optional[threading.Thread] = None
        self._heartbeat_stop = threading.Event()
        self.conn_for: Optional[Callable[[str], Any]] = None
        self._compute_lock = threading.RLock()

    # -- registry ----------------------------------------------------------------------

    @classmethod
    def open(cls, inv: Inventory, options: DeployOptions | None = None) -> "DeployContext":
        with cls._registry_lock:
            ctx = cls(inv, options)
            cls._registry[id(inv)] = ctx
            return ctx

    @classmethod
    def of(cls, inv: Inventory) -> "DeployContext":
        """The context of this inventory's run (a default one for `ascendctl play`)."""
        with cls._registry_lock:
            ctx = cls._registry.get(id(inv))
            if ctx is None:
                ctx = cls._registry[id(inv)] = cls(inv)
            return ctx

    def close(self) -> None:
        self.release_lock()
        with self._registry_lock:
            self._registry.pop(id(self.inv), None)

    # -- node access -------------------------------------------------------------------

    def ops(self, host: Host, conn: Any) -> NodeOps:
        return NodeOps(conn, node=host.name, root=self.inv.deploy.root,
                       python=self.inv.deploy.python, timeout=host.ssh.command_timeout)

    def ops_for(self, host: Host) -> NodeOps:
        assert self.conn_for is not None, "connections are bound by the first deploy task"
        return self.ops(host, self.conn_for(host.name))

    def each_host(self, fn: Callable[[Host], Any]) -> dict[str, Any]:
        """fn on every host in parallel; results by host name (exceptions re-raised)."""
        hosts = self.inv.hosts
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
            futures = {host.name: pool.submit(fn, host) for host in hosts}
            return {name: future.result() for name, future in futures.items()}

    # -- computed once ----------------------------------------------------------------

    def secrets(self) -> dict[str, str]:
        if self._secrets is None:
            from ascendctl.render.secrets import resolve_secrets

            self._secrets = resolve_secrets(self.inv)
        return self._secrets

    def weights_plan(self) -> Any:
        with self._compute_lock:
            if self._weights_plan is None and self.inv.model.source is not None:
                from ascendctl.weights.plan import plan_for_inventory

                self._weights_plan = plan_for_inventory(self.inv)
            return self._weights_plan

    def release(self) -> ReleasePlan:
        with self._compute_lock:
            return self._release_locked()

    def _release_locked(self) -> ReleasePlan:
        if self._plan is None:
            if not self.states:
                raise AscendctlError("internal: release planned before node states were read")
            nics = {h.name: self.states[h.name].get("nic") for h in self.inv.hosts
                    if h.nic is None}
            missing = [name for name, nic in nics.items() if not nic]
            if missing:
                raise no_nic_error(self.inv, missing)
            device_ips = {h.name: self.states[h.name].get("device_ips") or []
                          for h in self.inv.hosts if h.device_ips is None}
            plan = self.weights_plan()
            digest = weights_digest(
                {n.name: [(f.path, f.entry.sha256) for f in n.files] for n in plan.nodes}
                if plan is not None else {"path": [(self.inv.model.path or "", "")]})
            self._plan = plan_release(self.inv, secrets=self.secrets(), nics=nics or None,
                                      device_ips=device_ips or None, weights_digest=digest)
        return self._plan

    def target(self, release_id: Optional[str] = None) -> SwitchTarget:
        """The new release (deploy) or an existing one (rollback) as a switch target."""
        if release_id is None:
            plan = self.release()
            return SwitchTarget(plan.release_id, plan.engine_units, plan.side_units)
        engine = {h.name: release_units(self.states, h.name, release_id, engine=True)
                  for h in self.inv.hosts}
        side = {h.name: release_units(self.states, h.name, release_id, engine=False)
                for h in self.inv.hosts}
        return SwitchTarget(release_id, engine, side)

    def current_release(self) -> Optional[str]:
        """The release the cluster serves now (the head's `current`)."""
        return self.states.get(self.inv.head.name, {}).get("current")

    # -- the lock ----------------------------------------------------------------------

    def acquire_lock(self, head_ops: NodeOps) -> None:
        token = token_source.token_hex(16)
        holder = {"holder": self.by, "token": token, "inventory": str(self.inv.path)}
        from datetime import datetime, timezone

        holder["since"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        answer = head_ops.lock("acquire", holder, stale_after=LOCK_STALE_S,
                               force=self.options.force_unlock)
        if not answer.get("acquired"):
            info = answer.get("holder") or {}
            self.outcome.lock_holder = {k: v for k, v in info.items() if k != "token"}
            stale = " (stale: no heartbeat for " \
                    f"{info.get('heartbeat_age_s', '?')} s; use --force-unlock if that " \
                    "deploy is gone)" if answer.get("stale") else ""
            raise DeployLocked(f"cluster {self.inv.cluster.name} is locked by "
                               f"{info.get('holder', '?')} since {info.get('since', '?')}"
                               f"{stale}")
        self.lock_token = token
        self._lock_holder = holder
        self._heartbeat_stop.clear()
        self._heartbeat = threading.Thread(target=self._beat, args=(head_ops,), daemon=True,
                                           name="deploy-lock-heartbeat")
        self._heartbeat.start()

    def _beat(self, head_ops: NodeOps) -> None:
        while not self._heartbeat_stop.wait(LOCK_HEARTBEAT_S):
            try:
                head_ops.lock("heartbeat", self._lock_holder)
            except AscendctlError:
                pass  # the next beat may get through; the switch reports real failures

    def release_lock(self) -> None:
        if self.lock_token is None:
            return
        self._heartbeat_stop.set()
        try:
            self.ops_for(self.inv.head).lock("release", self._lock_holder)
        except AscendctlError:
            pass
        self.lock_token = None


class DeployLocked(AscendctlError):
    exit_code = Exit.LOCKED


def no_nic_error(inv: Inventory, missing: list[str]) -> AscendctlError:
    return AscendctlError(f"no NIC carries the `ip` of {', '.join(missing)}: set `nic` in "
                          f"{inv.path} or fix the address")


def release_units(states: dict[str, dict[str, Any]], node: str, release_id: str, *,
                  engine: bool) -> tuple[str, ...]:
    """The units an existing release on `node` carries, in start order."""
    for release in states.get(node, {}).get("releases", []):
        if release["id"] == release_id:
            wanted = ENGINE_UNITS if engine else SIDE_UNITS
            return tuple(u for u in wanted if u in release.get("units", ()))
    raise AscendctlError(f"release {release_id} is not on {node}")
