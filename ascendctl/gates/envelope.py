"""The envelope gate: a sweep of rising concurrency on the candidate (the profile at each
of slo.promotion.envelope.levels, requests_per_slot × level requests, at least 8), each
level judged by the latency SLOs, its failed requests and whether it hung (not finished
within level_timeout_s); promotion/envelope.py finds the highest level that held with
every level below it. It fails only when not even the lowest level held. The envelope is
stored with the release's evidence and bounds what the gateway admits
(slo.promotion.envelope.enabled; render/admission.py).

The sweep stops at the first level that fails: above a hang there is nothing to learn,
and each hung level costs its whole timeout.
"""

from __future__ import annotations

import time
from typing import Any

from ascendctl.gates.context import GateContext, GateResult, timeline
from ascendctl.gates.head import LoadRun
from ascendctl.gates.profile import resolve_profile
from ascendctl.promotion.envelope import SweepPoint, find_envelope, judge_level

NAME = "envelope"
MIN_REQUESTS = 8


def run(ctx: GateContext) -> GateResult:
    e = ctx.spec.envelope
    base = resolve_profile(ctx.inv, ctx.spec)
    t0 = time.time()
    runs: list[LoadRun] = []
    points: list[SweepPoint] = []
    levels: list[dict[str, Any]] = []
    for level in e.levels:
        profile = base.at(level, max(MIN_REQUESTS, e.requests_per_slot * level))
        ctx.say(f"envelope: concurrency {level} ({profile.num_prompts} requests, "
                f"{e.level_timeout_s:g} s at most)")
        run_ = ctx.candidate.load(profile, e.level_timeout_s)
        runs.append(run_)
        point = SweepPoint(concurrency=level, figures=run_.figures, hung=run_.hung,
                           errors=0 if run_.hung else run_.errors)
        points.append(point)
        verdict = judge_level(point, ctx.inv.slo)
        levels.append({"concurrency": level, "held": verdict.held,
                       "reasons": list(verdict.reasons), "wall_s": round(run_.wall_s, 3),
                       "figures": run_.figures.as_dict() if run_.figures else None})
        if not verdict.held:
            break
    envelope = find_envelope(points, ctx.inv.slo)
    record = {"profile": base.as_dict(), "levels": levels, "verdict": envelope.as_dict(),
              "envelope": envelope.concurrency, "requests": timeline(runs, t0)}
    return GateResult(NAME, envelope.concurrency is not None, envelope.summary(), record,
                      envelope=envelope.concurrency)
