"""JUnit XML for CI: one <testsuite> per node, one <testcase> per check on that node.

fail -> <failure> (message, then the remediation in the body); skip -> <skipped>;
warn -> passes, with the warning and its fix in <system-out> (the exit code, 3, says
"warnings"); an unreachable node -> every selected check a <failure type="unreachable">
that says why.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from itertools import groupby
from typing import Any

from ascendctl.fileio import write_atomic


def junit_xml(report: dict[str, Any]) -> bytes:
    suites = ET.Element("testsuites", name="ascendctl preflight", time=f"{report['duration_s']:.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_node = {n: list(rs) for n, rs in groupby(report["results"], key=lambda r: r["node"])}
    for node in report["nodes"]:
        name = node["name"]
        suite = ET.SubElement(suites, "testsuite", name=f"preflight {name}",
                              hostname=str(node["address"]), timestamp=report["started"][:19])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
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
        for r in results:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=f"preflight.{name}.{r['category']}",
                                 name=r["id"], time="0.000")
            if r["status"] == "fail":
                counts["failures"] += 1
                kind = r.get("_type") or ("unreachable" if node["state"] == "unreachable" else "fail")
                failure = ET.SubElement(case, "failure", message=r["message"], type=kind)
                failure.text = _body(r)
            elif r["status"] == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=r["message"])
            else:
                out = ET.SubElement(case, "system-out")
                out.text = (f"WARNING: {_body(r)}" if r["status"] == "warn"
                            else f"{r['status']}: {r['message']}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{node.get('gather_s') or 0:.3f}")
    for key, value in totals.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def _body(r: dict[str, Any]) -> str:
    lines = [f"{r['node']} {r['id']}: {r['message']}" if "node" in r else r["message"]]
    if r.get("remediation"):
        lines.append(f"remediation: {r['remediation']}")
    lines += [f"  {d}" for d in r.get("details") or []]
    return "\n".join(lines)


def write_junit(report: dict[str, Any], path: str | os.PathLike[str]) -> None:
    write_atomic(path, junit_xml(report), 0o644)
