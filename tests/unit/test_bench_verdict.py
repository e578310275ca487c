"""The figures are vLLM's own (read from its real result file, captured on the lab), the
verdict compares them with the inventory's SLOs, and the report says so in a table,
JSON and JUnit."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from junitparser import JUnitXml

from ascendctl.benchmark.figures import parse_result
from ascendctl.benchmark.report import bench_table, junit_report
from ascendctl.junit import write_junit
from ascendctl.benchmark.run import BenchReport, headline, headline_from_record
from ascendctl.benchmark.settings import BenchSettings
from ascendctl.benchmark.slo import evaluate
from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit
from ascendctl.inventory.model import SloSpec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / \
    "vllm_bench_serve_result_lab.txt"


def vllm_result() -> dict:
    text = FIXTURE.read_text()
    assert text.startswith("# source:")
    return json.loads(text.split("\n", 1)[1])


def test_figures_are_read_from_vllm_s_result_file():
    raw = vllm_result()
    figures = parse_result(raw)
    assert figures.completed == raw["completed"] == 8 and figures.failed == 0
    assert figures.output_throughput == raw["output_throughput"]
    assert figures.latency("ttft", "p99") == raw["p99_ttft_ms"]
    assert figures.latency("tpot", "p99") == raw["p99_tpot_ms"]
    assert figures.latency("itl", "median") == raw["median_itl_ms"]
    assert figures.latency("e2el", "p50") == raw["p50_e2el_ms"]
    assert figures.max_concurrency == 4


def test_a_file_that_is_not_a_result_is_an_error():
    with pytest.raises(AscendctlError, match="lacks output_throughput"):
        parse_result({"completed": 3, "duration": 1.0})
    with pytest.raises(AscendctlError, match="no result object"):
        parse_result(["not", "a", "dict"])


def test_slo_pass_and_fail_on_the_same_figures():
    figures = parse_result(vllm_result())
    per_npu = figures.output_throughput / 2
    p99_ttft = figures.latency("ttft", "p99")
    passing = SloSpec(min_output_tokens_per_s_per_npu=per_npu * 0.5,
                      max_p99_ttft_ms=p99_ttft * 2, max_p99_tpot_ms=10_000)
    verdict = evaluate(figures, passing, npus=2)
    assert verdict.passed and verdict.output_tokens_per_s_per_npu == pytest.approx(per_npu)
    assert [c.status for c in verdict.checks] == ["pass", "pass", "pass"]
    assert verdict.summary() == "PASS: all 3 SLOs met"

    failing = SloSpec(min_output_tokens_per_s_per_npu=per_npu * 0.5,
                      max_p99_ttft_ms=p99_ttft / 2)
    verdict = evaluate(figures, failing, npus=2)
    assert not verdict.passed
    assert [(c.id, c.status) for c in verdict.checks] == [
        ("slo.min_output_tokens_per_s_per_npu", "pass"), ("slo.max_p99_ttft_ms", "fail")]
    assert verdict.summary().startswith("FAIL: p99 time to first token: ")
    # per NPU divides by the NPUs serving: the same figures miss on a bigger layout
    assert not evaluate(figures, passing, npus=16).passed


def test_failed_requests_fail_even_without_slo():
    figures = parse_result(vllm_result())
    assert evaluate(figures, SloSpec(), npus=2).passed
    assert "no SLO" in evaluate(figures, SloSpec(), npus=2).summary()
    broken = replace(figures, completed=6, failed=2)
    verdict = evaluate(broken, SloSpec(), npus=2)
    assert not verdict.passed and verdict.problems == ["2 of 8 requests failed"]


def report(slo: SloSpec) -> BenchReport:
    figures = parse_result(vllm_result())
    return BenchReport(cluster="lab", node="node0", release="r-0123456789ab",
                       stamp="20261129T103356Z-b9eb",
                       settings=BenchSettings(input_len=32, output_len=16, concurrency=4,
                                              num_prompts=8),
                       figures=figures, verdict=evaluate(figures, slo, npus=2), seconds=28.8,
                       stored="/var/lib/ascendctl/bench/r-0123456789ab/x.json",
                       result_path=None)


def test_exit_code_json_and_history_headline():
    ok = report(SloSpec(max_p99_tpot_ms=10_000))
    bad = report(SloSpec(max_p99_tpot_ms=0.001))
    assert (ok.exit_code, bad.exit_code) == (Exit.OK, Exit.FAILED)
    data = json.loads(json.dumps(bad.as_dict()))
    assert data["verdict"]["status"] == "fail"
    assert data["verdict"]["checks"][0]["message"].startswith("p99 time per output token")
    assert data["settings"]["num_prompts"] == 8
    # what `history` reads back from the stored record is what was measured
    back = headline_from_record(data)
    assert back["verdict"] == "fail"
    assert back["figures"]["p99_tpot_ms"] == ok.figures.latency("tpot", "p99")
    assert headline(ok.figures, ok.verdict)["output_tok_s_per_npu"] == \
        pytest.approx(back["figures"]["output_tok_s_per_npu"], abs=1e-3)


def test_junit_has_one_case_per_slo_and_the_requests(tmp_path):
    path = tmp_path / "bench.xml"
    write_junit(junit_report(report(SloSpec(max_p99_ttft_ms=0.001, max_p99_tpot_ms=10_000))),
                path)
    xml = JUnitXml.fromfile(str(path))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == {"slo.max_p99_ttft_ms", "slo.max_p99_tpot_ms", "requests"}
    assert not cases["slo.max_p99_ttft_ms"].is_passed
    assert cases["slo.max_p99_tpot_ms"].is_passed and cases["requests"].is_passed
    assert xml.failures == 1 and xml.tests == 3


def test_table_shows_figures_limits_and_results():
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(bench_table(report(SloSpec(max_p99_ttft_ms=0.001))))
    text = console.export_text()
    assert "output throughput per NPU (2 NPUs)" in text
    assert "<= 0.001" in text and "FAIL" in text
