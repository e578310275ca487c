"""The preflight verdict: every check's result per node, the nodes' reachability, the
exit code, and the JSON document (schema: schema/preflight.schema.json)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascendctl.checks import SPECS, CheckResult, Severity, Status, run_checks, selected
from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.inventory.pd import launch_views, side_view
from ascendctl.inventory import Inventory
from ascendctl.preflight.collect import node_facts, owners_of, record_problem, section_text
from ascendctl.preflight.expectations import OwnHolders, PreflightOptions, build_expectations
from ascendctl.preflight.owners import own_holders

SCHEMA_ID = "ascendctl-preflight/1"
REACHABLE = "host.reachable"


@dataclass
class NodeState:
    name: str
    address: str
    rank: int
    state: str                       # ok | unreachable | gather_failed
    error: str | None = None
    error_kind: str | None = None
    gather_s: float | None = None
    remote_executions: int | None = None
    allowed: list[str] = field(default_factory=list)    # what our own units hold (re-deploy)
    problems: list[str] = field(default_factory=list)   # fact commands that failed

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "rank": self.rank,
                "state": self.state, "reachable": self.state != "unreachable",
                "error": self.error, "error_kind": self.error_kind, "gather_s": self.gather_s,
                "remote_executions": self.remote_executions, "allowed": list(self.allowed),
                "problems": list(self.problems)}


@dataclass
class PreflightReport:
    inventory: str
    cluster: str
    nodes: list[NodeState]
    results: list[CheckResult]
    selected: list[str]
    started: float = field(default_factory=time.time)
    duration_s: float = 0.0

    def counts(self) -> dict[str, int]:
        c = Counter(r.status.value for r in self.results)
        return {s.value: c.get(s.value, 0) for s in Status}

    @property
    def unreachable(self) -> list[str]:
        return [n.name for n in self.nodes if n.state == "unreachable"]

    def exit_code(self) -> Exit:
        """4 a node unreachable, else 1 a failure, else 3 warnings only, else 0."""
        if self.unreachable:
            return Exit.UNREACHABLE
        statuses = {r.status for r in self.results}
        if Status.FAIL in statuses:
            return Exit.FAILED
        if Status.WARN in statuses:
            return Exit.WARNINGS
        return Exit.OK

    def status(self) -> str:
        return {Exit.UNREACHABLE: "unreachable", Exit.FAILED: "fail", Exit.WARNINGS: "warn",
                Exit.OK: "pass"}[self.exit_code()]

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status in (Status.FAIL, Status.WARN)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_ID,
            "inventory": self.inventory,
            "cluster": self.cluster,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "status": self.status(),
            "exit_code": int(self.exit_code()),
            "summary": self.counts(),
            "checks": list(self.selected),
            "nodes": [n.to_dict() for n in self.nodes],
            "results": [result_dict(r) for r in self.results],
        }


def result_dict(r: CheckResult) -> dict[str, Any]:
    spec = SPECS[r.check_id]
    return {**r.to_dict(), "title": spec.title, "scope": spec.scope}


def validate_selection(patterns: Iterable[str], option: str) -> list[str]:
    """Check ids or category prefixes; an InputError names the one that matches nothing."""
    out = []
    for raw in patterns:
        for p in (x.strip() for x in raw.split(",")):
            if not p:
                continue
            if p not in SPECS and not any(i.startswith(p.rstrip(".") + ".") for i in SPECS):
                cats = sorted({s.category for s in SPECS.values()})
                raise InputError(f"{p!r} is neither a check id nor a category "
                                 f"({', '.join(cats)}; `ascendctl preflight --list` shows the ids)",
                                 field=option)
            out.append(p)
    return out


def _reachable_selected(only: Sequence[str], skip: Sequence[str]) -> bool:
    def match(patterns: Sequence[str]) -> bool:
        return any(REACHABLE == p or (p not in SPECS and REACHABLE.startswith(p.rstrip(".") + "."))
                   for p in patterns)
    return (not only or match(only)) and not match(skip)


def _reachability(node: NodeState, inv: Inventory) -> CheckResult:
    spec = SPECS[REACHABLE]
    host = inv.host(node.name)
    if node.state == "ok":
        execs = f", {node.remote_executions} remote execution(s)" if node.remote_executions else ""
        return CheckResult(REACHABLE, spec.category, spec.severity, node.name, Status.PASS,
                           f"gathered over SSH in {node.gather_s or 0:.2f} s{execs}")
    ssh = host.ssh
    probe = f"ssh -p {ssh.port} {ssh.user}@{host.address} true"
    if node.state == "unreachable":
        message = f"unreachable: {node.error}"
        fix = (f"{probe}  # then check the node's power and sshd (`systemctl status ssh`), "
               "the inventory address, port, user, key and known_hosts")
    else:
        message = f"SSH works but the gather script failed: {node.error}"
        fix = f"{probe}; bash --version  # the gather needs bash; rerun with --json for the output"
    return CheckResult(REACHABLE, spec.category, Severity.FAIL, node.name, Status.FAIL,
                       message, fix)


def build_report(inv: Inventory, hosts: Sequence[str], gathers: Mapping[str, Mapping[str, Any]],
                 failures: Mapping[str, tuple[str, str | None]], *,
                 pings: Mapping[str, Mapping[str, Any]] | None = None,
                 options: PreflightOptions | None = None, only: Sequence[str] = (),
                 skip: Sequence[str] = (), exec_counts: Mapping[str, int] | None = None,
                 model_bytes: int | None = None, started: float | None = None) -> PreflightReport:
    """Judge the gathered records. `hosts`: the nodes preflight targeted, in rank order;
    `gathers`: their first-round records; `failures`: node -> (reason, kind) for nodes
    that could not be reached; `pings`: second-round records."""
    options = options or PreflightOptions()
    pings = pings or {}
    exec_counts = exec_counts or {}
    facts, nodes, own = {}, [], {}
    for name in hosts:
        host = inv.host(name)
        node = NodeState(name, host.address, host.rank, "ok",
                         remote_executions=exec_counts.get(name))
        record = gathers.get(name)
        if record is not None and record.get("unreachable"):
            node.state, node.error = "unreachable", record.get("error") or "unreachable"
            node.error_kind = record.get("error_kind")
        elif name in failures or record is None:
            reason, kind = failures.get(name, ("no facts were gathered", None))
            node.state, node.error, node.error_kind = "unreachable", reason, kind
            if kind == "failed":
                node.state = "gather_failed"
        elif (why := record_problem(record)) is not None:
            node.state, node.error = "gather_failed", why
        else:
            node.gather_s = record.get("duration_s")
            f = node_facts(name, record, pings.get(name))
            facts[name] = f
            node.problems = [f"{sec}: {what}" for sec, what in f.problems]
            if options.allow_own_units:
                # the ports its own launch binds (in PD, its side's)
                launch = side_view(inv, host) if inv.pd is not None else inv
                holders = own_holders(launch, launch.host(name), owners_of(record),
                                      section_text(record, "ss"))
                own[name] = holders
                node.allowed = _allowed_notes(holders, f)
        nodes.append(node)
    # each serving group is judged as a cluster of its own (its head, its ranks, its RoCE
    # plane); one group: the whole inventory, as before. In PD each side of a unit is one
    # vLLM launch (its own DP group and head).
    results = []
    for view in launch_views(inv):
        members = {h.name for h in view.hosts}
        exp = build_expectations(view, options=options,
                                 own={n: o for n, o in own.items() if n in members},
                                 model_bytes=model_bytes)
        results += run_checks({n: f for n, f in facts.items() if n in members}, exp,
                              only=only or None, skip=skip or None)
    by_node: dict[str, list[CheckResult]] = {n: [] for n in hosts}
    reach_selected = _reachable_selected(only, skip)
    for node in nodes:
        # an unreachable node is always reported, whatever --only/--skip say
        if node.state != "ok" or reach_selected:
            by_node[node.name].append(_reachability(node, inv))
    for r in results:
        by_node[r.node].append(r)
    ordered = [r for name in hosts for r in by_node[name]]
    ids = selected(only or None, skip or None)
    return PreflightReport(inventory=str(inv.path), cluster=inv.cluster.name, nodes=nodes,
                           results=ordered, selected=([REACHABLE] if reach_selected else []) + ids,
                           started=started or time.time())


def _allowed_notes(holders: OwnHolders, facts) -> list[str]:
    notes = [f"port {port} held by {who}" for port, who in sorted(holders.ports.items())]
    if facts.npu_smi is not None and holders.npu_pids:
        mine = sorted({p.pid for p in facts.npu_smi.processes if p.pid in holders.npu_pids})
        if mine:
            notes.append("NPUs held by our own engine: pid " + " ".join(map(str, mine)))
    return notes
