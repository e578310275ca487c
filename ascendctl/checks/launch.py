"""Launch-plan checks over the inventory itself: data-parallel ranks and HCCL timeouts."""

from __future__ import annotations

from typing import Mapping

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import cluster_check
from ascendctl.facts.node import NodeFacts


@cluster_check(
    "launch.dp_ranks", category="launch", severity=Severity.FAIL,
    title="data-parallel ranks cover 0..DP-1 without overlap",
    catches="wrong or overlapping --data-parallel-start-rank, a head that is headless or does not "
            "start at rank 0, a follower without --headless (init hangs)",
    remediation="Give node i `--data-parallel-start-rank` = sum of the local sizes before it; "
                "`--headless` on every follower",
)
def dp_ranks(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    # the plan is the inventory's: judged over every node it names, reachable or not
    plan = {n: exp.node(n) for n in {*exp.nodes, *facts}}
    if not any(ne.dp_start_rank is not None for ne in plan.values()):
        return {n: Outcome.skip("no data-parallel layout in the inventory") for n in facts}
    problems: dict[str, list[str]] = {n: [] for n in plan}
    owner: dict[int, str] = {}
    for n, ne in sorted(plan.items(), key=lambda kv: (kv[1].dp_start_rank or 0, kv[0])):
        if ne.dp_start_rank is None or not ne.dp_size_local:
            problems[n].append("no --data-parallel-start-rank/--data-parallel-size-local")
            continue
        for r in range(ne.dp_start_rank, ne.dp_start_rank + ne.dp_size_local):
            if r in owner:
                problems[n].append(f"DP rank {r} also on {owner[r]}")
                problems[owner[r]].append(f"DP rank {r} also on {n}")
            owner.setdefault(r, n)
        if n == exp.head:
            if ne.dp_start_rank != 0:
                problems[n].append(f"the head starts at rank {ne.dp_start_rank}, not 0")
            if ne.headless:
                problems[n].append("the head must not be --headless")
        elif exp.head and ne.headless is False:
            problems[n].append("a follower needs --headless")
    if exp.dp_size:
        gaps = [r for r in range(exp.dp_size) if r not in owner]
        extra = [r for r in owner if r >= exp.dp_size]
        target = exp.head if exp.head in problems else sorted(problems)[0]
        if gaps:
            problems[target].append(f"no node runs DP rank(s) {gaps}")
        if extra:
            problems[target].append(f"DP rank(s) {extra} exceed --data-parallel-size {exp.dp_size}")
    out = {}
    for n, found in problems.items():
        if n not in facts:
            continue
        if found:
            out[n] = Outcome(Status.FAIL, "; ".join(dict.fromkeys(found)),
                             "Fix data_parallel start ranks in the inventory: head 0, then each follower "
                             "the sum of the local sizes before it, followers --headless")
        else:
            ne = plan[n]
            start, size = ne.dp_start_rank or 0, ne.dp_size_local or 0  # both set: nothing found
            out[n] = Outcome.ok(f"DP ranks {start}..{start + size - 1}")
    return out


@cluster_check(
    "launch.hccl_timeout", category="launch", severity=Severity.WARN,
    title="HCCL connect timeout covers the start-up stagger",
    catches="HCCL_CONNECT_TIMEOUT shorter than the time between the first and the last rank "
            "starting (EI0006 socket timeout at init)",
    remediation="Raise HCCL_CONNECT_TIMEOUT above the start-up budget, or start the ranks closer together",
)
def hccl_timeout(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    timeout = exp.hccl_connect_timeout_s or 120   # HCCL's default
    if exp.rank_start_budget_s is None:
        return {n: Outcome.skip("no start-up budget known") for n in facts}
    if exp.rank_start_budget_s >= timeout:
        return {n: Outcome(Status.FAIL,
                           f"ranks may start up to {exp.rank_start_budget_s} s apart but "
                           f"HCCL_CONNECT_TIMEOUT is {timeout} s",
                           f"HCCL_CONNECT_TIMEOUT={int(exp.rank_start_budget_s * 1.5) + 60}")
                for n in facts}
    return {n: Outcome.ok(f"HCCL_CONNECT_TIMEOUT {timeout} s > start-up budget {exp.rank_start_budget_s} s")
            for n in facts}
