"""How a bench run is shown: a Rich table, JUnit XML (one testcase per SLO)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ascendctl.benchmark.run import BenchReport
from ascendctl.benchmark.slo import FAIL
from ascendctl.fileio import write_atomic


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def bench_table(report: BenchReport):
    from rich.table import Table

    f, v, s = report.figures, report.verdict, report.settings
    table = Table(title=(f"vllm bench serve on {report.node} · release {report.release} · "
                         f"{s.prompts} prompts {s.input_len}→{s.output_len} tokens, "
                         f"concurrency {s.concurrency}"))
    for column in ("figure", "value", "SLO", "result"):
        table.add_column(column)
    slo_by_id = {c.id: c for c in v.checks}

    def row(name: str, value: Any, slo_id: str | None = None, unit: str = "") -> None:
        check = slo_by_id.get(slo_id) if slo_id else None
        limit = f"{check.comparison} {check.limit:g}" if check else ""
        result = "" if check is None else (
            "[red]FAIL[/red]" if check.status == FAIL else "[green]pass[/green]")
        table.add_row(name, f"{_fmt(value)}{(' ' + unit) if unit and value is not None else ''}",
                      limit, result)

    row("requests completed / failed", f"{f.completed} / {f.failed}")
    row("duration", f.duration_s, unit="s")
    row("output throughput", f.output_throughput, unit="tok/s")
    row(f"output throughput per NPU ({v.npus} NPUs)", v.output_tokens_per_s_per_npu,
        "slo.min_output_tokens_per_s_per_npu", "tok/s")
    row("total token throughput", f.total_token_throughput, unit="tok/s")
    for metric, title in (("ttft", "time to first token"), ("tpot", "time per output token"),
                          ("itl", "inter-token latency"), ("e2el", "end-to-end latency")):
        row(f"{title} median", f.latency(metric, "median"), unit="ms")
        slo_id = {"ttft": "slo.max_p99_ttft_ms", "tpot": "slo.max_p99_tpot_ms"}.get(metric)
        row(f"{title} p99", f.latency(metric, "p99"), slo_id, "ms")
    return table


def junit_xml(report: BenchReport) -> bytes:
    v = report.verdict
    cases = [(c.id, c.message, c.status == FAIL) for c in v.checks]
    cases.append(("requests", f"{report.figures.completed} completed, "
                  f"{report.figures.failed} failed", bool(v.problems)))
    suites = ET.Element("testsuites", name="ascendctl bench", time=f"{report.seconds:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=f"bench {report.cluster}",
                          hostname=report.node, tests=str(len(cases)),
                          failures=str(sum(1 for *_x, failed in cases if failed)),
                          errors="0", skipped="0", time=f"{report.seconds:.3f}")
    for name, message, failed in cases:
        case = ET.SubElement(suite, "testcase", classname=f"bench.{report.cluster}",
                             name=name, time="0.000")
        if failed:
            failure = ET.SubElement(case, "failure", message=message, type="slo")
            failure.text = "; ".join(v.problems) if name == "requests" else message
        else:
            ET.SubElement(case, "system-out").text = message
    for key in ("tests", "failures", "errors", "skipped"):
        suites.set(key, suite.attrib[key])
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def write_junit(report: BenchReport, path: Path) -> None:
    write_atomic(path, junit_xml(report), 0o644)
