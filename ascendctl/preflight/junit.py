"""Preflight in JUnit: one <testsuite> per node, one <testcase> per check on that node.

fail -> <failure> (message, then the remediation in the body); skip -> <skipped>;
warn -> passes, with the warning and its fix in <system-out> (the exit code, 3, says
"warnings"); an unreachable node -> every selected check a <failure type="unreachable">
that says why.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from ascendctl.junit import FAILURE, PASSED, SKIPPED, Case, JUnitReport, Suite


def junit_report(report: dict[str, Any]) -> JUnitReport:
    by_node = {n: list(rs) for n, rs in groupby(report["results"], key=lambda r: r["node"])}
    suites = []
    for node in report["nodes"]:
        name = node["name"]
        results = list(by_node.get(name, []))
        if node["state"] != "ok":
            reached = {r["id"] for r in results}
            why = next((r for r in results if r["id"] == "host.reachable"), None)
            results += [{"id": cid, "category": cid.split(".")[0], "status": "fail",
                         "message": f"not run: {name} {node['state'].replace('_', ' ')} "
                                    f"({node['error']})",
                         "remediation": why["remediation"] if why else None, "details": [],
                         "title": cid, "_type": "unreachable"}
                        for cid in report["checks"] if cid not in reached]
        suites.append(Suite(f"preflight {name}", [_case(node, r) for r in results],
                            seconds=node.get("gather_s") or 0, hostname=str(node["address"]),
                            timestamp=report["started"][:19]))
    return JUnitReport("ascendctl preflight", report["duration_s"], suites)


def _case(node: dict[str, Any], r: dict[str, Any]) -> Case:
    classname = f"preflight.{node['name']}.{r['category']}"
    if r["status"] == "fail":
        kind = r.get("_type") or ("unreachable" if node["state"] == "unreachable" else "fail")
        return Case(classname, r["id"], FAILURE, r["message"], kind, _body(r))
    if r["status"] == "skip":
        return Case(classname, r["id"], SKIPPED, r["message"])
    return Case(classname, r["id"], PASSED, text=(f"WARNING: {_body(r)}" if r["status"] == "warn"
                                                  else f"{r['status']}: {r['message']}"))


def _body(r: dict[str, Any]) -> str:
    lines = [f"{r['node']} {r['id']}: {r['message']}" if "node" in r else r["message"]]
    if r.get("remediation"):
        lines.append(f"remediation: {r['remediation']}")
    lines += [f"  {d}" for d in r.get("details") or []]
    return "\n".join(lines)
