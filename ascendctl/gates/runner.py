"""Run the inventory's promotion gates on one serving group, in order, keeping each gate's
evidence on the group's head beside the release (runtime promotion_store.py: the record
as JSON and its pictures as one HTML page) with a `promotion` event in history.jsonl. The
first gate that fails ends the run: the caller rolls the group back.

A new gate is one module here with NAME and run(ctx) -> GateResult, listed in GATES and
named in inventory/promotion.py's GateName."""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Optional

from ascendctl.benchmark.run import make_stamp
from ascendctl.gates import envelope, long_tail, regression, soak
from ascendctl.gates.context import GateContext, GateResult

GATES: dict[str, ModuleType] = {m.NAME: m for m in (regression, long_tail, envelope, soak)}


@dataclass
class StoredResult:
    result: GateResult
    path: Optional[str]         # the record on the head
    html: Optional[str]         # its pictures

    @property
    def line(self) -> str:
        verdict = "pass" if self.result.passed else "FAIL"
        return f"{self.result.gate} {verdict}: {self.result.summary}"


@dataclass
class PromotionRun:
    release: str
    node: str
    group: str
    results: list[StoredResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.result.passed for r in self.results)

    @property
    def envelope(self) -> Optional[int]:
        return next((r.result.envelope for r in self.results
                     if r.result.gate == envelope.NAME and r.result.passed), None)

    def summary(self) -> str:
        failed = [r for r in self.results if not r.result.passed]
        if failed:
            return "; ".join(
                f"promotion gate {r.result.gate} failed: {r.result.summary}"
                + (f" (evidence: {r.html or r.path})" if r.path else "") for r in failed)
        return "; ".join(r.line for r in self.results) or "no promotion gate ran"

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release, "node": self.node, "group": self.group,
                "passed": self.passed, "envelope": self.envelope, "summary": self.summary(),
                "gates": [{"gate": r.result.gate, "passed": r.result.passed,
                           "summary": r.result.summary, "record": r.path, "html": r.html}
                          for r in self.results]}


def evidence(ctx: GateContext, result: GateResult, stamp: str, when: str, by: str
             ) -> dict[str, Any]:
    return {**result.record, "release": ctx.release, "stamp": stamp, "time": when, "by": by,
            "node": ctx.candidate.name, "group": ctx.group, "gate": result.gate,
            "status": "pass" if result.passed else "fail", "summary": result.summary,
            "previous": ctx.previous, "envelope": result.envelope}


def pictures(record: dict[str, Any]) -> Optional[str]:
    from ascendctl.gates.pictures import evidence_html

    return evidence_html(record)


def run_gates(ctx: GateContext, gates: Optional[list[str]] = None) -> PromotionRun:
    """GATES (default the inventory's, in their order) on CTX's group; stops at the first
    failure. Raises GateError when a gate cannot measure at all."""
    names = gates if gates is not None else list(ctx.spec.ordered_gates)
    out = PromotionRun(ctx.release, ctx.candidate.name, ctx.group)
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    for name in names:
        result = GATES[name].run(ctx)
        stamp = make_stamp()
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = evidence(ctx, result, stamp, when, by)
        event = {"event": "promotion", "release": ctx.release, "gate": name,
                 "status": record["status"], "summary": result.summary, "stamp": stamp,
                 "time": when, "by": by, "node": ctx.candidate.name, "group": ctx.group,
                 "envelope": result.envelope}
        stored = ctx.candidate.store(stamp, record, pictures(record), event)
        out.results.append(StoredResult(result, stored.get("path"), stored.get("html")))
        ctx.say(f"{name}: {'pass' if result.passed else 'FAIL'}: {result.summary}")
        if not result.passed and ctx.spec.fail_fast:
            break
    return out
