"""Playbook modules of playbooks/preflight.yaml.

- `preflight_gather` (each host): the gather script in ONE remote execution; its output
  becomes the host's `preflight_gather` fact.
- `preflight_pings` (each host): only when the inventory gives some node no device_ips:
  a second, ping-only round trip towards those nodes, whose addresses the first round
  read from their /etc/hccn.conf. Skipped (no remote execution) otherwise.
- `preflight_checks` (controller, `run_once: true`): Expectations from the inventory, the
  checks over every host's facts, the report as the `preflight_report` fact.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ascendctl.facts.hccn import parse_hccn_conf
from ascendctl.playbook.modules import Module, ModuleContext, ModuleError, ModuleResult, register_module
from ascendctl.preflight.collect import DEFAULT_GATHER_TIMEOUT_S, gather_round, record_problem, section_text
from ascendctl.preflight.expectations import PreflightOptions
from ascendctl.preflight.plan import gather_params, second_round_peers
from ascendctl.preflight.report import build_report, validate_selection
from ascendctl.transport.errors import ConnectError

GATHER_FACT = "preflight_gather"
PINGS_FACT = "preflight_pings"
REPORT_FACT = "preflight_report"

Strategy = Literal["pairs", "ring", "all-ports", "none"]


class _GatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pings: Strategy = "pairs"
    max_jobs: int = Field(default=16, ge=1, le=256)
    timeout_s: float = Field(default=DEFAULT_GATHER_TIMEOUT_S, gt=0)


@register_module("preflight_gather")
class PreflightGather(Module):
    """Gather every fact of this host in one remote execution (read-only)."""

    Args = _GatherArgs

    def run(self, ctx: ModuleContext, args: _GatherArgs) -> ModuleResult:
        params = gather_params(ctx.inventory, ctx.host, play_hosts=ctx.play_hosts,
                               pings=args.pings, max_jobs=args.max_jobs)
        try:
            ctx.conn.open()     # connect first: the clock sample must not include the handshake
            record = gather_round(ctx.run_script, params, timeout=ctx.timeout or args.timeout_s)
        except ConnectError as err:
            # kept as a fact so that the checks task can say why (the engine would only
            # mark the host unreachable); the host then counts as failed in the play
            return ModuleResult(failed=True, msg=f"unreachable: {err.reason}", facts={
                GATHER_FACT: {"unreachable": True, "error": err.reason, "error_kind": err.kind}})
        problem = record_problem(record)
        if problem:
            return ModuleResult(failed=True, msg=problem, facts={GATHER_FACT: record})
        pings = sum(len(t) for t in params.ping_targets.values())
        return ModuleResult(msg=f"{len(record['output'])} bytes in {record['duration_s']:.2f}s, "
                            f"{pings} ping(s)", facts={GATHER_FACT: record})


@register_module("preflight_pings")
class PreflightPings(Module):
    """Ping the device IPs of nodes the inventory names none for (second round trip)."""

    Args = _GatherArgs

    def run(self, ctx: ModuleContext, args: _GatherArgs) -> ModuleResult:
        peers = second_round_peers(ctx.inventory, ctx.host, play_hosts=ctx.play_hosts,
                                   pings=args.pings)
        if not peers:
            return ModuleResult(skipped=True, msg="every target's device IPs came from the "
                                "inventory: pinged in the gather round trip")
        known: dict[str, dict[int, str]] = {}
        for peer in peers:
            record = (ctx.hostvars.get(peer) or {}).get(GATHER_FACT)
            if record and record_problem(record) is None:
                known[peer] = parse_hccn_conf(section_text(record, "hccn_conf")).addresses()
        params = gather_params(ctx.inventory, ctx.host, play_hosts=ctx.play_hosts,
                               pings=args.pings, known_ips=known, max_jobs=args.max_jobs)
        params = dataclasses.replace(params, pings_only=True)
        if not params.ping_targets:
            return ModuleResult(skipped=True, msg="no device IPs known for " + ", ".join(peers))
        record = gather_round(ctx.run_script, params, owners=False,
                              timeout=ctx.timeout or args.timeout_s)
        problem = record_problem(record)
        if problem:
            return ModuleResult(failed=True, msg=problem, facts={PINGS_FACT: record})
        count = sum(len(t) for t in params.ping_targets.values())
        return ModuleResult(msg=f"{count} ping(s) to {', '.join(known)}",
                            facts={PINGS_FACT: record})


class _ChecksArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    only: list[str] = []
    skip: list[str] = []
    clock_tolerance_s: float = Field(default=1.0, gt=0)
    disk_headroom_gib: float = Field(default=1.0, ge=0)
    allow_own_units: bool = True
    model_bytes: Optional[int] = Field(default=None, ge=0)

    @field_validator("only", "skip", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value


@register_module("preflight_checks")
class PreflightChecks(Module):
    """Run the checks over every host's facts (on the controller; use `run_once: true`)."""

    Args = _ChecksArgs
    runs_on = "controller"

    def run(self, ctx: ModuleContext, args: _ChecksArgs) -> ModuleResult:
        inv = ctx.inventory
        hosts = [h.name for h in inv.hosts if h.name in ctx.hostvars]
        gathers, pings, failures, execs = {}, {}, {}, {}
        for name in hosts:
            facts = ctx.hostvars[name]
            if facts.get(GATHER_FACT):
                gathers[name] = facts[GATHER_FACT]
            if facts.get(PINGS_FACT):
                pings[name] = facts[PINGS_FACT]
            conn = _connection(ctx, name)
            if conn is not None:
                execs[name] = conn.exec_count
                if conn.failure is not None:
                    failures[name] = (conn.failure.reason, conn.failure.kind)
        options = PreflightOptions(clock_tolerance_s=args.clock_tolerance_s,
                                   disk_headroom_gib=args.disk_headroom_gib,
                                   allow_own_units=args.allow_own_units)
        report = build_report(inv, hosts, gathers, failures, pings=pings, options=options,
                              only=validate_selection(args.only, "only"),
                              skip=validate_selection(args.skip, "skip"),
                              exec_counts=execs, model_bytes=args.model_bytes)
        data = report.to_dict()
        # One result for the run_once task (the engine keeps facts only from that one).
        failed = sorted({r.node for r in report.results if r.status.value == "fail"})
        counts = ", ".join(f"{v} {k}" for k, v in data["summary"].items())
        msg = f"{data['status']}: {counts}" + (f"; failing on {', '.join(failed)}" if failed else "")
        # what failed, so that a deploy refused at this gate says why (the first few)
        failing = [r for r in report.results if r.status.value == "fail"]
        msg += "".join(f"; {r.node} {r.check_id}: {r.message[:200]}" for r in failing[:4])
        if len(failing) > 4:
            msg += f"; and {len(failing) - 4} more (ascendctl preflight -i INV)"
        return ModuleResult(failed=bool(failed), msg=msg, facts={REPORT_FACT: data})


def _connection(ctx: ModuleContext, name: str):
    try:
        return ctx.connection_for(name)
    except (ModuleError, Exception):  # not run_once / not a host of this run
        return None
