"""The long-tail gate: at least slo.promotion.long_tail_requests answers at the profile's
concurrency with the production sampling (slo.promotion.sampling; a field left out is the
server's default), each failed when its request failed, the garbage detector flags it or it
misses the prompt set's expected answer; the failure rate is compared with the previous
release's (promotion/tail.py).

The prompts are the quality gate's (slo.quality's set, else the built-in one), cycled.
The previous release's rate is its stored evidence on the same prompts when it has one,
else measured on a head still serving it, else there is none: the candidate's rate is
recorded as the baseline and the gate passes, saying so.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any, Optional

from ascendctl.gates.context import GateContext, GateResult, timeline
from ascendctl.gates.head import GateHead, LoadRun
from ascendctl.gates.profile import resolve_profile
from ascendctl.inventory.prompt_regex import MatchUndecided, RegexSearcher
from ascendctl.inventory.prompts import PromptSet
from ascendctl.promotion.garbage import check_answer
from ascendctl.promotion.tail import TailCounts, answer_failed, compare_tails
from ascendctl.quality.gate import check_fits, gate_spec

NAME = "long_tail"
FAILING_SHOWN = 20
TEXT_KEPT = 2000


def prompt_set_of(ctx: GateContext) -> tuple[PromptSet, list[dict[str, Any]], str]:
    """slo.promotion.prompts, else the quality gate's set; a prompt without its own
    max_tokens takes slo.quality.max_tokens (checked against max_model_len here)."""
    quality = gate_spec(ctx.inv)
    prompts = ctx.spec.prompt_set() or quality.prompt_set()
    check_fits(ctx.inv, prompts, quality.max_tokens)
    # stored counts are compared only for the same prompts, limits and sampling
    sampling = json.dumps(ctx.spec.sampling.request_fields(), sort_keys=True)
    digest = hashlib.sha256(f"{prompts.digest(quality.max_tokens)} {sampling}".encode())
    return prompts, prompts.requests(quality.max_tokens), digest.hexdigest()


def judge_answers(run: LoadRun, prompts: PromptSet) -> tuple[TailCounts, list[dict[str, Any]]]:
    """The counts of a tail run and its first failing answers (what failed and why)."""
    failing: list[dict[str, Any]] = []
    failed = 0
    with RegexSearcher() as searcher:
        for record in run.requests:
            index = int(record.get("i") or 0)
            prompt = prompts.prompts[index % len(prompts.prompts)]
            error = record.get("error")
            text = record.get("text") or ""
            check = check_answer(text) if error is None else None
            expect_ok: Optional[bool] = None
            if error is None and prompt.expect is not None:
                try:
                    expect_ok = prompt.expect.matches(text, searcher)
                except MatchUndecided:
                    expect_ok = False
            garbage = check is not None and not check.ok
            if answer_failed(error, garbage, expect_ok):
                failed += 1
                if len(failing) < FAILING_SHOWN:
                    why = error or ("; ".join(f"{f.kind}: {f.detail}" for f in check.findings)
                                    if check and check.findings else
                                    f"expected {prompt.expect.describe()}" if prompt.expect
                                    else "failed")
                    failing.append({"release": run.release, "i": index, "prompt": prompt.id,
                                    "why": why, "text": text[:TEXT_KEPT]})
    return TailCounts(requests=len(run.requests), failed=failed), failing


def _tail(head: GateHead, ctx: GateContext, requests: list[dict[str, Any]]) -> LoadRun:
    profile = resolve_profile(ctx.inv, ctx.spec)
    count = ctx.spec.long_tail_requests
    limit = ctx.spec.profile.timeout_s * max(1, math.ceil(count / profile.num_prompts))
    ctx.say(f"long tail: {count} requests at concurrency {profile.concurrency} on {head.name} "
            f"({head.release})")
    return head.tail(requests, count, profile.concurrency, limit, ctx.spec.profile.timeout_s,
                     ctx.spec.sampling.request_fields())


def _stored_counts(record: Optional[dict[str, Any]], digest: str) -> Optional[TailCounts]:
    if not record or record.get("prompt_digest") != digest:
        return None
    counts = (record.get("counts") or {}).get("candidate")
    if not isinstance(counts, dict):
        return None
    try:
        return TailCounts(int(counts["requests"]), int(counts["failed"]))
    except (KeyError, TypeError, ValueError):
        return None


def run(ctx: GateContext) -> GateResult:
    prompts, requests, digest = prompt_set_of(ctx)
    t0 = time.time()
    runs = [_tail(ctx.candidate, ctx, requests)]
    candidate, failing = judge_answers(runs[0], prompts)
    previous = _stored_counts(ctx.stored(NAME), digest)
    source = f"{ctx.previous}'s stored evidence"
    if previous is None and ctx.live is not None:
        runs.append(_tail(ctx.live, ctx, requests))
        previous, shown = judge_answers(runs[1], prompts)
        failing += shown[:max(0, FAILING_SHOWN - len(failing))]
        source = f"{ctx.live.name} serving {ctx.previous}"
    record: dict[str, Any] = {
        "prompt_set": prompts.source, "prompt_digest": digest,
        "counts": {"candidate": {"requests": candidate.requests, "failed": candidate.failed},
                   "previous": None if previous is None else
                   {"requests": previous.requests, "failed": previous.failed}},
        "failing_answers": failing, "requests": timeline(runs, t0), "source": source}
    if previous is None:
        return GateResult(NAME, True, f"{candidate.failed}/{candidate.requests} answers failed "
                                      f"({candidate.rate:.2%}); no previous rate to compare "
                                      "with: recorded as the baseline", record)
    try:
        comparison = compare_tails(previous, candidate, ctx.spec)
    except ValueError as err:
        return GateResult(NAME, True, f"not compared ({err}): recorded as the baseline",
                          record)
    record["verdict"] = comparison.as_dict()
    return GateResult(NAME, comparison.passed, f"{comparison.summary()} ({source})", record)
