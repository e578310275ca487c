"""The check registry and the runner.

A node check is `fn(node, facts, expectations) -> Outcome`; a cluster check is
`fn(facts_by_node, expectations) -> {node: Outcome}`. A check trips by returning
`Status.FAIL`; the runner reports it at the check's catalogued severity.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Mapping, TypeVar

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import CheckResult, CheckSpec, Outcome, Severity, Status
from ascendctl.facts.node import NodeFacts

NodeFn = Callable[[str, NodeFacts, Expectations], Outcome]
ClusterFn = Callable[[Mapping[str, NodeFacts], Expectations], Mapping[str, Outcome]]

SPECS: dict[str, CheckSpec] = {}
_NODE: dict[str, NodeFn] = {}
_CLUSTER: dict[str, ClusterFn] = {}


def _register(spec: CheckSpec) -> None:
    if spec.id in SPECS:
        raise ValueError(f"duplicate check id {spec.id}")
    SPECS[spec.id] = spec


_Check = TypeVar("_Check", NodeFn, ClusterFn)


def _catalogued(checks: dict[str, _Check], spec: CheckSpec) -> Callable[[_Check], _Check]:
    """Decorator: catalogue SPEC and run the function as its check."""
    def deco(fn: _Check) -> _Check:
        _register(spec)
        checks[spec.id] = fn
        return fn
    return deco


def node_check(id: str, *, category: str, severity: Severity, title: str, catches: str,
               remediation: str) -> Callable[[NodeFn], NodeFn]:
    return _catalogued(_NODE, CheckSpec(id, category, severity, "node", title, catches, remediation))


def cluster_check(id: str, *, category: str, severity: Severity, title: str, catches: str,
                  remediation: str) -> Callable[[ClusterFn], ClusterFn]:
    return _catalogued(_CLUSTER, CheckSpec(id, category, severity, "cluster", title, catches,
                                           remediation))


def declare(id: str, *, category: str, severity: Severity, scope: str, title: str, catches: str,
            remediation: str) -> None:
    """A catalogued id whose results are produced elsewhere (e.g. by the executor)."""
    _register(CheckSpec(id, category, severity, scope, title, catches, remediation))


def _result(spec: CheckSpec, node: str, outcome: Outcome) -> CheckResult:
    status = outcome.status
    if status == Status.FAIL and spec.severity == Severity.WARN:
        status = Status.WARN
    return CheckResult(spec.id, spec.category, spec.severity, node, status, outcome.message,
                       outcome.remediation if status in (Status.FAIL, Status.WARN) else None,
                       outcome.details)


def selected(only: Iterable[str] | None = None, skip: Iterable[str] | None = None) -> list[str]:
    """Check ids after `--only`/`--skip` (exact ids or a category prefix such as `roce`)."""
    def match(check_id: str, patterns: Iterable[str]) -> bool:
        # an exact id selects only itself; anything else is a prefix (`roce`, `roce.ip`)
        return any(check_id == p or (p not in SPECS and check_id.startswith(p.rstrip(".") + "."))
                   for p in patterns)

    ids = [i for i in SPECS if i in _NODE or i in _CLUSTER]
    if only:
        only = list(only)
        ids = [i for i in ids if match(i, only)]
    if skip:
        skip = list(skip)
        ids = [i for i in ids if not match(i, skip)]
    return ids


def run_checks(facts: Mapping[str, NodeFacts], expectations: Expectations, *,
               only: Iterable[str] | None = None, skip: Iterable[str] | None = None,
               unreachable: Collection[str] = ()) -> list[CheckResult]:
    """Run the selected checks over the facts of every reachable node.

    `facts` holds only nodes whose gather succeeded; nodes in `unreachable` are reported
    by the executor (`host.reachable`) and cross-node checks ignore them.
    """
    results: list[CheckResult] = []
    nodes = [n for n in facts if n not in set(unreachable)]
    reachable = {n: facts[n] for n in nodes}
    for check_id in selected(only, skip):
        spec = SPECS[check_id]
        if check_id in _NODE:
            for node in nodes:
                try:
                    outcome = _NODE[check_id](node, reachable[node], expectations)
                except Exception as err:  # a check bug must not hide the other results
                    outcome = Outcome(Status.FAIL, f"check raised {type(err).__name__}: {err}")
                results.append(_result(spec, node, outcome))
        else:
            try:
                outcomes = _CLUSTER[check_id](reachable, expectations)
            except Exception as err:
                outcomes = {n: Outcome(Status.FAIL, f"check raised {type(err).__name__}: {err}")
                            for n in nodes}
            for node in nodes:
                outcome = outcomes.get(node) or Outcome.skip("not evaluated for this node")
                results.append(_result(spec, node, outcome))
    return results


def overall_status(results: Iterable[CheckResult]) -> Status:
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return Status.FAIL
    if Status.WARN in statuses:
        return Status.WARN
    return Status.PASS
