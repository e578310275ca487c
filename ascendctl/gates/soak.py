"""The soak gate: slo.promotion.soak_s of traffic at the profile's concurrency on the
candidate, one sample of each node of the group every soak_sample_s (engine starts and
gang recoveries, the fullest NPU's HBM, the engine processes' RSS, and on the head vLLM's
running requests and generated tokens), judged per node by promotion/soak.py: no crash
or recovery, growth under the bounds, no stall.

The head samples itself while it sends the traffic (one long call); the followers are
sampled from here over their own connections meanwhile.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from ascendctl_runtime import layout

from ascendctl.gates.context import GateContext, GateResult, timeline
from ascendctl.gates.head import GateHead, LoadRun
from ascendctl.gates.profile import resolve_profile
from ascendctl.promotion.soak import SoakSample, SoakVerdict, judge_soak

NAME = "soak"


def to_samples(rows: list[dict[str, Any]]) -> list[SoakSample]:
    """SoakSamples from the node's samples, in time order (a value the node could not read
    counts as 0: a missing counter cannot show a crash or a stall)."""
    def number(row: dict[str, Any], key: str) -> float:
        value = row.get(key)
        return float(value) if isinstance(value, (int, float)) else 0.0

    out: list[SoakSample] = []
    for row in sorted((r for r in rows if isinstance(r.get("t"), (int, float))),
                      key=lambda r: r["t"]):
        if out and row["t"] <= out[-1].t_s:
            continue
        out.append(SoakSample(t_s=float(row["t"]),
                              engine_restarts=int(number(row, "engine_restarts")),
                              hbm_used_mib=number(row, "hbm_used_mib"),
                              rss_mib=number(row, "rss_mib"),
                              requests_running=number(row, "requests_running"),
                              generation_tokens_total=number(row, "generation_tokens_total"),
                              recoveries=int(number(row, "recoveries"))))
    return out


def _sample_followers(followers: list[GateHead], every_s: float, stop: threading.Event,
                      out: dict[str, list[dict[str, Any]]]) -> None:
    while True:
        for head in followers:
            out.setdefault(head.name, []).append(head.call(
                "sample", engine_units=list(layout.ENGINE_UNITS),
                metrics_port=head.inv.serving.port))
        if stop.wait(every_s):
            return


def run(ctx: GateContext) -> GateResult:
    spec = ctx.spec
    profile = resolve_profile(ctx.inv, spec)
    ctx.say(f"soak: {spec.soak_s:g} s at concurrency {profile.concurrency}, a sample every "
            f"{spec.soak_sample_s:g} s")
    t0 = time.time()
    follower_rows: dict[str, list[dict[str, Any]]] = {}
    stop = threading.Event()
    sampler: Optional[threading.Thread] = None
    if ctx.followers:
        sampler = threading.Thread(target=_sample_followers, daemon=True,
                                   args=(ctx.followers, spec.soak_sample_s, stop,
                                         follower_rows))
        sampler.start()
    try:
        load, head_rows = ctx.candidate.soak(profile, spec.soak_s, spec.soak_sample_s,
                                             spec.profile.timeout_s)
    finally:
        stop.set()
        if sampler is not None:
            sampler.join(timeout=spec.soak_sample_s + 60)
    series = {ctx.candidate.name: head_rows, **follower_rows}
    verdicts: dict[str, SoakVerdict] = {}
    problems = []
    for node, rows in series.items():
        try:
            verdicts[node] = judge_soak(to_samples(rows), spec)
        except ValueError as err:
            problems.append(f"{node}: {err}")
    runs: list[LoadRun] = [load]
    record: dict[str, Any] = {
        "profile": profile.as_dict(), "samples": _relative(head_rows, t0),
        "follower_samples": {n: _relative(r, t0) for n, r in follower_rows.items()},
        "verdict": {n: v.as_dict() for n, v in verdicts.items()},
        "requests": timeline(runs, t0),
        "request_errors": load.errors}
    failed = [f"{n}: {v.summary()}" for n, v in verdicts.items() if not v.passed] + problems
    if failed:
        return GateResult(NAME, False, "; ".join(failed), record)
    head = verdicts[ctx.candidate.name]
    return GateResult(NAME, True, f"{head.summary()} ({len(load.requests)} requests, "
                                  f"{load.errors} failed)", record)


def _relative(rows: list[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    return [{**r, "t": round(float(r["t"]) - t0, 3)} for r in rows
            if isinstance(r.get("t"), (int, float))]
