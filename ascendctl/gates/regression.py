"""The regression gate: the candidate against the release it replaces on the same bench
profile, in paired rounds (promotion/regression.py judges them).

Each head first runs one round that is not counted (a fresh engine's first requests
measure its start-up, not the release). Side by side when another group's head still
serves the previous release (a rolling deploy's first groups): each round runs on both
heads at the same moment, each head loading its own engine, so whatever the moment brings
(another tenant, a burst of live traffic, a shared machine's busy cores) falls on both
members of the pair. Run back to back instead, the live head's traffic competed with the
canary's round on the lab's shared cores and was batched with the live head's own: an
unchanged release measured 0.55 of itself. Otherwise
the candidate's rounds are paired with the figures the previous release gave on this
profile when it was itself the candidate (its stored evidence). With neither, there is
nothing to compare with: the candidate's figures are recorded as the baseline the next
release is held to, and the gate passes, saying so.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Optional

from ascendctl.gates.context import GateContext, GateResult, timeline
from ascendctl.gates.head import GateHead, LoadRun
from ascendctl.gates.profile import Profile, resolve_profile
from ascendctl.promotion.regression import PairedRound, RoundFigures, compare

NAME = "regression"


def _round(head: GateHead, profile: Profile, limit_s: float
           ) -> tuple[LoadRun, Optional[RoundFigures], Optional[str]]:
    """One round on HEAD: its run, and its figures or why there are none."""
    run = head.load(profile, limit_s)
    if run.hung:
        return run, None, f"{run.release} on {run.node}: the round did not finish in {limit_s:g} s"
    if run.errors or run.figures is None:
        first = next((r.get("error") for r in run.requests if r.get("error")), "no result")
        return run, None, (f"{run.release} on {run.node}: {run.errors} request(s) failed "
                           f"({first})")
    return run, RoundFigures.from_bench(run.figures), None


def _together(pool: ThreadPoolExecutor, heads: list[GateHead], profile: Profile,
              limit_s: float, runs: list[LoadRun]) -> tuple[list[RoundFigures], Optional[str]]:
    """One round on every head at the same moment (each over its own connection, with its
    own node's load generator): the figures in the order of HEADS, or the first problem."""
    results = list(pool.map(lambda head: _round(head, profile, limit_s), heads))
    runs.extend(run for run, _f, _p in results)
    problem = next((p for _r, _f, p in results if p), None)
    return [f for _r, f, _p in results if f is not None], problem


def _stored_rounds(record: Optional[dict[str, Any]], profile: Profile
                   ) -> Optional[list[RoundFigures]]:
    if not record or record.get("profile_digest") != profile.digest:
        return None
    rows = (record.get("rounds_figures") or {}).get("candidate") or []
    try:
        return [RoundFigures(**{k: float(row[k]) for k in
                                ("output_throughput", "p99_ttft_ms", "p99_tpot_ms")})
                for row in rows]
    except (KeyError, TypeError, ValueError):
        return None


def run(ctx: GateContext) -> GateResult:
    spec = ctx.spec
    profile = resolve_profile(ctx.inv, spec)
    limit = spec.profile.timeout_s
    runs: list[LoadRun] = []
    t0 = time.time()
    previous_rounds: list[RoundFigures] = []
    candidate_rounds: list[RoundFigures] = []
    stored = None if ctx.live else _stored_rounds(ctx.stored(NAME), profile)
    if ctx.live is not None:
        mode = f"side by side with {ctx.live.name} (serving {ctx.previous})"
    elif stored is not None:
        mode = f"against {ctx.previous}'s stored figures on this profile"
    else:
        mode = "baseline"
    ctx.say(f"regression: {spec.rounds} rounds of {profile.describe()}, {mode}")
    problem: Optional[str] = None
    heads = [ctx.candidate] + ([ctx.live] if ctx.live else [])
    with ThreadPoolExecutor(max_workers=len(heads)) as pool:
        # one round on each head first, not counted: a freshly started engine meets the
        # profile's shapes for the first time (allocator, caches), the serving one did
        # long ago; its first round would measure the start, not the release
        _warm, problem = _together(pool, heads, profile, limit, [])
        if problem:
            return GateResult(NAME, False, f"could not measure: {problem}",
                              {"profile": profile.as_dict(), "mode": mode})
        ctx.say("regression: warmed up (one uncounted round on each head)")
        for index in range(spec.rounds):
            figures, problem = _together(pool, heads, profile, limit, runs)
            if problem:
                break
            candidate_rounds.append(figures[0])
            previous_rounds += figures[1:]
            ctx.say(f"regression: round {index + 1}/{spec.rounds} done")
    record: dict[str, Any] = {
        "profile": profile.as_dict(), "profile_digest": profile.digest, "mode": mode,
        "rounds_figures": {"previous": [asdict(f) for f in previous_rounds],
                           "candidate": [asdict(f) for f in candidate_rounds]},
        "requests": timeline(runs, t0)}
    if problem:
        return GateResult(NAME, False, f"could not measure: {problem}", record)
    if stored is not None:
        count = min(len(stored), len(candidate_rounds))
        previous_rounds = stored[:count]
        candidate_rounds = candidate_rounds[:count]
    if not previous_rounds:
        summary = (f"no figures of {ctx.previous or 'a previous release'} on this profile: "
                   f"{ctx.release}'s {len(candidate_rounds)} rounds are recorded as the "
                   f"baseline (median {_median_tps(candidate_rounds):.1f} output tok/s)")
        return GateResult(NAME, True, summary, record)
    try:
        comparison = compare([PairedRound(p, c) for p, c in
                              zip(previous_rounds, candidate_rounds)], spec)
    except ValueError as err:
        return GateResult(NAME, True, f"not compared ({err}): the candidate's rounds are "
                                      "recorded as the baseline", record)
    record["verdict"] = comparison.as_dict()
    return GateResult(NAME, comparison.passed, f"{comparison.summary()} ({mode})", record)


def _median_tps(rounds: list[RoundFigures]) -> float:
    values = sorted(r.output_throughput for r in rounds)
    return values[len(values) // 2] if values else 0.0
