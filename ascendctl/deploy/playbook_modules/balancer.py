"""proxy_site and balancer: the nginx site on the gateway that balances across the serving
groups' heads, and taking a group out of it (and back) around its switch.

* `proxy_site` installs the site (templates/nginx/ascendctl.conf.j2) on the gateway with
  every group in the balancer, checks it with `nginx -t` and makes nginx.service serve it:
  started and enabled when it does not run, reloaded gracefully when the site changed.
* `balancer: {state: out}` (before a group's engines stop, only when they restart): the
  site again with the group's head marked `down`, a graceful reload (old workers finish
  what they carry; the node waits until every worker runs the new site), then a bounded
  drain — until the head's `vllm:num_requests_running` and `..._waiting` are 0, at most
  `deploy.rolling.drain_timeout` seconds. Not when the group is the only one (there is
  nowhere else to send traffic), when every group switches at once, or when no other
  group answers a completion: each of these is said in the step's message.
* `balancer: {state: in}` (after the group passed its gates, and in the rollout's always
  play): the group back in the balancer — unless its restore failed (it stays out).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Literal, Optional

from ascendctl_runtime.probe import IN_FLIGHT
from pydantic import BaseModel, ConfigDict

from ascendctl.deploy.handoffs import DEPLOY_LOCK, NODE_STATES
from ascendctl.deploy.engines import StepFailed
from ascendctl.deploy.playbook_modules.common import NoArgs, engine
from ascendctl.deploy.run import DeployRun
from ascendctl.playbook.modules import (
    FileDiff, Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.render.proxy import render_site, site_path
from ascendctl.transport.nodecall import NodeCallError, call_node

if TYPE_CHECKING:
    from ascendctl.inventory import Host

DRAIN_POLL_S = 0.5


def admitted_envelope(ctx: ModuleContext, run: DeployRun,
                      drained: AbstractSet[str]) -> Optional[int]:
    """With slo.promotion.envelope enabled: the smallest envelope stored for a release the
    groups in the balancer serve (measured by this run's envelope gate, else read from the
    group's head); None when none is known (the gateway then admits everything)."""
    inv = ctx.inventory
    spec = inv.slo.promotion
    if spec is None or not spec.envelope.enabled:
        return None
    found = []
    for group in inv.serving_groups:
        if group.name in drained or group.name in run.in_maintenance:
            continue
        release = run.serving_release(group.name)
        if release is None:
            continue
        if release not in run.envelopes:
            run.envelopes[release] = stored_envelope(ctx, run, release)
        known = run.envelopes[release]
        if known is not None:
            found.append(known)
    return min(found) if found else None


def stored_envelope(ctx: ModuleContext, run: DeployRun, release: str) -> Optional[int]:
    """RELEASE's envelope as its gate stored it on the head of the group it was measured
    on (the rollout's canary): each head of the run asked in turn."""
    inv = ctx.inventory
    for group in inv.serving_groups:
        if group.name in run.in_maintenance:
            continue
        head = run.group_head(group.name)
        try:
            answer = call_node(ctx.connection_for(head.name), node=head.name,
                               python=inv.deploy.python, entry="promotion_store",
                               request={"op": "envelope", "kwargs": {
                                   "root": inv.deploy.root, "release": release}},
                               timeout=60, become=ctx.become)
        except NodeCallError as err:
            raise ModuleError(f"the envelope of {release} on {head.name}: {err.reason}") \
                from None
        value = answer.get("envelope")
        if isinstance(value, int):
            return value
    return None


def apply_site(ctx: ModuleContext, run: DeployRun, drained: AbstractSet[str]) -> dict[str, Any]:
    """The site with DRAINED out of the balancer, on the gateway (one remote execution)."""
    inv = ctx.inventory
    gateway = inv.gateway
    assert gateway is not None
    if gateway.serving_group in run.in_maintenance:
        # not a host of this run: its nginx keeps the site it has (the groups in
        # maintenance out, by its watcher)
        return {"changed": False, "was_active": True, "content": "", "in_maintenance": True}
    content = render_site(inv, set(drained) | run.in_maintenance,
                          envelope=admitted_envelope(ctx, run, drained))
    try:
        answer = call_node(ctx.connection_for(gateway.name), node=gateway.name,
                           python=inv.deploy.python, entry="proxy_node",
                           request={"op": "apply", "kwargs": {
                               "path": site_path(inv),
                               "content_b64": base64.b64encode(content).decode(),
                               "check": ctx.check, "diff": ctx.diff or ctx.check}},
                           timeout=180, become=ctx.become)
    except NodeCallError as err:
        raise ModuleError(f"the proxy on {gateway.name}: {err.reason}") from None
    answer["content"] = content.decode()
    return answer


def _what_nginx_did(answer: dict[str, Any]) -> str:
    if answer.get("started"):
        return "nginx started"
    if answer.get("reloaded"):
        return "nginx reloaded"
    return "nginx already serves it"


@register_module("proxy_site")
class ProxySite(Module):
    """Install the proxy's nginx site on the gateway (the groups this run took out of the
    balancer stay out), check it with nginx -t, and make nginx serve it."""

    needs = (DEPLOY_LOCK, NODE_STATES)

    runs_on = "controller"
    Args = NoArgs

    def run(self, ctx: ModuleContext, args: NoArgs) -> ModuleResult:
        inv = ctx.inventory
        gateway = inv.gateway
        if gateway is None:
            return ModuleResult(msg="serving.proxy.enabled is false: no proxy")
        run = DeployRun.of(ctx)
        run.require_no_failure(ctx)
        if gateway.serving_group in run.in_maintenance:
            return ModuleResult(msg=f"the gateway {gateway.name} is in maintenance (serving "
                                f"group {gateway.serving_group}): its site is left as it is")
        answer = apply_site(ctx, run, run.balancer_out)
        groups = ", ".join(g.name for g in inv.serving_groups)
        path = site_path(inv)
        diffs = []
        if answer["changed"] and (ctx.diff or ctx.check):
            diffs.append(FileDiff(path=f"{gateway.name}:{path}",
                                  before=answer.get("previous"), after=answer["content"]))
        if ctx.check:
            verb = "would install" if answer["changed"] else "in place:"
            start = "" if answer["was_active"] else "; would start nginx"
            return ModuleResult(changed=answer["changed"] or not answer["was_active"],
                                msg=f"{verb} {path} on {gateway.name} (port "
                                f"{inv.serving.proxy.port} → {groups}){start}", diffs=diffs)
        changed = bool(answer["changed"] or answer.get("started") or answer.get("enabled"))
        return ModuleResult(changed=changed, diffs=diffs,
                            msg=f"{path} on {gateway.name}: port {inv.serving.proxy.port} → "
                            f"{groups}; {_what_nginx_did(answer)}")


class _BalancerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Literal["out", "in"]


@register_module("balancer")
class Balancer(Module):
    """Take the play's serving groups out of the gateway's balancer and drain their heads
    (state: out), or put them back (state: in)."""

    needs = (DEPLOY_LOCK, NODE_STATES)
    order_by = ("state", {"in": ((NODE_STATES,), ())})    # also in a rollout's always play

    runs_on = "controller"
    Args = _BalancerArgs

    def run(self, ctx: ModuleContext, args: _BalancerArgs) -> ModuleResult:
        run = DeployRun.of(ctx)
        groups = run.groups_of(run.hosts(ctx.play_hosts))
        if args.state == "out":
            run.require_no_failure(ctx)
            return self._out(ctx, run, groups)
        return self._in(ctx, run, groups)

    # -- out ---------------------------------------------------------------------------

    def _out(self, ctx: ModuleContext, run: DeployRun,
             groups: dict[str, list["Host"]]) -> ModuleResult:
        inv = ctx.inventory
        switching = [g for g, hosts in groups.items() if not run.already_serving(hosts)]
        if not switching:
            return ModuleResult(msg=f"nothing restarts in {', '.join(groups)}: it stays in the "
                                "balancer")
        if not inv.replicated:
            where = " behind the proxy" if inv.gateway is not None else ""
            return ModuleResult(msg=f"one serving group{where}: there is nowhere else to send "
                                "its traffic, so no drain (requests that arrive while it "
                                "restarts are refused)")
        others = [g.name for g in inv.serving_groups if g.name not in switching
                  and g.name not in run.balancer_out and g.name not in run.not_serving
                  and g.name not in run.in_maintenance]
        if not others:
            return ModuleResult(msg=f"every serving group switches at once (deploy.rolling."
                                f"max_unavailable {inv.deploy.rolling.max_unavailable}): "
                                "nowhere to send traffic, so no drain")
        serving, why_not = self._serving_elsewhere(ctx, run, others)
        if not serving:
            return ModuleResult(msg=f"no other serving group answers a completion "
                                f"({'; '.join(why_not)}): {', '.join(switching)} stays in the "
                                "balancer while it switches (no drain)")
        timeout = inv.deploy.rolling.drain_timeout
        gateway = inv.gateway
        assert gateway is not None
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would take {', '.join(switching)} out of "
                                f"the balancer on {gateway.name} ({', '.join(serving)} keeps "
                                f"serving) and wait up to {timeout:g} s for its requests")
        answer = apply_site(ctx, run, run.balancer_out | set(switching))
        run.done.add("out", switching)
        for group in switching:
            run.log.note(f"{group} out of the balancer on {gateway.name} "
                         f"({_what_nginx_did(answer)}); {', '.join(serving)} serves",
                         node=gateway.name)
        drained = [self._drain(ctx, run, group, timeout) for group in switching]
        return ModuleResult(changed=True, msg=f"{', '.join(switching)} out of the balancer on "
                            f"{gateway.name} ({', '.join(serving)} serves); "
                            + "; ".join(drained))

    def _serving_elsewhere(self, ctx: ModuleContext, run: DeployRun, others: list[str]
                           ) -> tuple[list[str], list[str]]:
        """The other groups whose head answers a completion now (and why the rest not)."""
        serving, why_not = [], []
        for group in others:
            head = run.group_head(group)
            current = run.serving_release(group)
            if current is None:
                why_not.append(f"{group}: nothing deployed")
                continue
            try:
                answer = engine(ctx, run, head, "the other groups serve").probe(current,
                                                                                 stream=False)
            except StepFailed as err:
                why_not.append(f"{group}: {err.reason}")
                continue
            if answer.ready:
                serving.append(group)
            else:
                why_not.append(f"{group}: {answer.error}")
        return serving, why_not

    def _drain(self, ctx: ModuleContext, run: DeployRun, group: str, timeout: float) -> str:
        """Until the group's head runs and queues no request (two readings in a row), at
        most TIMEOUT seconds; what happened, in words."""
        head = run.group_head(group)
        current = run.state(head).current
        if current is None:
            return f"{group}: nothing deployed, nothing to drain"
        control = engine(ctx, run, head, "drain")
        started = time.monotonic()
        deadline = started + timeout
        most = 0.0
        quiet = 0
        while True:
            try:
                metrics = control.metrics(current)
            except StepFailed as err:
                return f"{head.name} has no metrics ({err.reason}): nothing to drain"
            in_flight = sum(metrics.get(name, 0.0) for name in IN_FLIGHT)
            most = max(most, in_flight)
            quiet = quiet + 1 if in_flight == 0 else 0
            if quiet >= 2:
                seconds = time.monotonic() - started
                run.log.note(f"{head.name} drained in {seconds:.1f} s", node=head.name)
                return (f"{head.name} drained in {seconds:.1f} s (at most {most:.0f} request(s) "
                        "in flight)")
            if time.monotonic() > deadline:
                run.log.note(f"{head.name}: drain timed out after {timeout:g} s with "
                             f"{in_flight:.0f} request(s) in flight; switching anyway",
                             node=head.name)
                return (f"{head.name}: drain timed out after {timeout:g} s with "
                        f"{in_flight:.0f} request(s) in flight (they are cut)")
            control.sleep(DRAIN_POLL_S)

    # -- in ----------------------------------------------------------------------------

    def _in(self, ctx: ModuleContext, run: DeployRun,
            groups: dict[str, list["Host"]]) -> ModuleResult:
        inv = ctx.inventory
        if ctx.run_state.failure is None:
            for hosts in groups.values():
                run.done.add("settled", [h.name for h in hosts])
        out = [g for g in groups if g in run.balancer_out]
        if not out:
            if not inv.replicated:
                return ModuleResult(msg="one serving group: it never left the balancer")
            return ModuleResult(msg=f"{', '.join(groups)} did not leave the balancer")
        kept = [g for g in out if g in run.not_serving]
        back = [g for g in out if g not in run.not_serving]
        if ctx.check:
            return ModuleResult(changed=True, msg=f"would put {', '.join(back)} back")
        gateway = inv.gateway
        assert gateway is not None
        msg = ""
        if back:
            answer = apply_site(ctx, run, run.balancer_out - set(back))
            run.done.add("in", back)
            msg = (f"{', '.join(back)} back in the balancer on {gateway.name} "
                   f"({_what_nginx_did(answer)})")
            run.log.note(msg, node=gateway.name)
        if kept:
            msg += ("; " if msg else "") + (f"{', '.join(kept)} does not serve (its restore "
                                            "failed): kept out of the balancer")
        return ModuleResult(changed=bool(back), failed=False, msg=msg)

