"""Run playbooks/preflight.yaml through the playbook engine and collect the report.

    report, run = run_preflight(inventory, PreflightRequest(only=["roce"]))
    report["status"], report["exit_code"]      # the JSON document (docs/preflight.md)

`run_facts` runs only its `facts` tasks and returns each host's `NodeFacts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ascendctl.paths import playbooks_dir
from ascendctl.playbook import PlaybookRunner, RunOptions, load_playbook, templar_for
from ascendctl.playbook.reporting import Reporter
from ascendctl.preflight.collect import node_facts, record_problem
from ascendctl.preflight.expectations import PreflightOptions
from ascendctl.preflight.playbook_modules import GATHER_FACT, PINGS_FACT, REPORT_FACT
from ascendctl.preflight.report import build_report

if TYPE_CHECKING:
    from ascendctl.facts import NodeFacts
    from ascendctl.inventory import Inventory
    from ascendctl.playbook import RunReport

PLAYBOOK = "preflight.yaml"


@dataclass
class PreflightRequest:
    limit: Optional[str] = None
    forks: int = 16
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    pings: str = "pairs"
    options: PreflightOptions = field(default_factory=PreflightOptions)
    connect_timeout: Optional[float] = None
    model_bytes: Optional[int] = None


def playbook_path():
    return playbooks_dir() / PLAYBOOK


def _runner(inv: "Inventory", req: PreflightRequest, *, facts_only: bool,
            reporter: "Reporter | None") -> "PlaybookRunner":
    book = load_playbook(playbook_path())
    extra: dict[str, Any] = {
        "preflight_pings": req.pings, "preflight_only": list(req.only),
        "preflight_skip": list(req.skip),
        "preflight_clock_tolerance_s": req.options.clock_tolerance_s,
        "preflight_disk_headroom_gib": req.options.disk_headroom_gib,
        "preflight_allow_own_units": req.options.allow_own_units,
        "preflight_model_bytes": req.model_bytes,
    }
    options = RunOptions(limit=req.limit, forks=req.forks, extra_vars=extra,
                         tags=frozenset({"facts"}) if facts_only else frozenset(),
                         connect_timeout=req.connect_timeout)
    return PlaybookRunner(book, inv, options, reporter or Reporter(), templar_for(book.path))


def _failures(runner: "PlaybookRunner") -> dict[str, tuple[str, str | None]]:
    """Hosts whose gather never produced a record: why (from the connection or the task)."""
    out: dict[str, tuple[str, str | None]] = {}
    gather = next((t for p in runner.report.plays for t in p.tasks
                   if t.module == "preflight_gather"), None)
    for name, state in runner.states.items():
        if state.facts.get(GATHER_FACT):
            continue
        conn_failure = runner.pool.conn(name).failure if runner.pool is not None else None
        res = gather.results.get(name) if gather else None
        if conn_failure is not None:
            out[name] = (conn_failure.reason, conn_failure.kind)
        elif res is not None:
            out[name] = (res.msg or res.status, res.error_kind or
                         ("unreachable" if res.status == "unreachable" else "failed"))
        else:
            out[name] = ("not gathered (the run stopped before it)", "failed")
    return out


def run_preflight(inv: "Inventory", req: PreflightRequest | None = None, *,
                  reporter: "Reporter | None" = None) -> tuple[dict[str, Any], "RunReport"]:
    """Run the preflight playbook; returns (report document, the engine's run report)."""
    req = req or PreflightRequest()
    runner = _runner(inv, req, facts_only=False, reporter=reporter)
    run = runner.run()
    report = next((s.facts[REPORT_FACT] for s in runner.states.values()
                   if s.facts.get(REPORT_FACT)), None)
    if report is None:
        # the check task never ran (no host reachable, or interrupted): judge what we have
        hosts = [h.name for h in inv.hosts if h.name in runner.states]
        built = build_report(
            inv, hosts, {n: s.facts[GATHER_FACT] for n, s in runner.states.items()
                         if s.facts.get(GATHER_FACT)},
            _failures(runner),
            pings={n: s.facts[PINGS_FACT] for n, s in runner.states.items()
                   if s.facts.get(PINGS_FACT)},
            options=req.options, only=req.only, skip=req.skip, exec_counts=run.exec_counts,
            model_bytes=req.model_bytes, started=run.started)
        report = built.to_dict()
    import time

    report["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.started))
    report["duration_s"] = round(run.duration, 3)
    for node in report["nodes"]:
        node["remote_executions"] = run.exec_counts.get(node["name"], node["remote_executions"])
    return report, run


@dataclass
class FactsResult:
    facts: dict[str, "NodeFacts"]                    # hosts gathered
    failed: dict[str, tuple[str, str | None]]        # host -> (why, kind)
    exec_counts: dict[str, int]
    durations: dict[str, float]
    run: "RunReport"


def run_facts(inv: "Inventory", req: PreflightRequest | None = None, *,
              reporter: "Reporter | None" = None) -> FactsResult:
    req = req or PreflightRequest()
    runner = _runner(inv, req, facts_only=True, reporter=reporter)
    run = runner.run()
    facts, durations = {}, {}
    failed = _failures(runner)
    for name, state in runner.states.items():
        record = state.facts.get(GATHER_FACT)
        if not record:
            continue
        if record.get("unreachable"):
            failed[name] = (record.get("error") or "unreachable", record.get("error_kind") or "unreachable")
            continue
        problem = record_problem(record)
        if problem:
            failed[name] = (problem, "failed")
            continue
        facts[name] = node_facts(name, record, state.facts.get(PINGS_FACT))
        durations[name] = record["duration_s"]
    return FactsResult(facts, failed, dict(run.exec_counts), durations, run)
