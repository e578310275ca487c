"""How a bench run is shown: a Rich table, JUnit XML (one testcase per SLO)."""

from __future__ import annotations

from typing import Any

from ascendctl.benchmark.run import BenchReport
from ascendctl.benchmark.slo import FAIL
from ascendctl.junit import FAILURE, PASSED, Case, JUnitReport, Suite


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


def junit_report(report: BenchReport) -> JUnitReport:
    """One testcase per SLO and one for the requests (failed requests fail it)."""
    v = report.verdict
    classname = f"bench.{report.cluster}"
    cases = [Case(classname, c.id, FAILURE, c.message, "slo", c.message)
             if c.status == FAIL else Case(classname, c.id, PASSED, text=c.message)
             for c in v.checks]
    requests = f"{report.figures.completed} completed, {report.figures.failed} failed"
    cases.append(Case(classname, "requests", FAILURE, requests, "slo", "; ".join(v.problems))
                 if v.problems else Case(classname, "requests", PASSED, text=requests))
    suite = Suite(f"bench {report.cluster}", cases, seconds=report.seconds,
                  hostname=report.node)
    return JUnitReport("ascendctl bench", report.seconds, [suite])
