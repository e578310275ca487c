"""`ascendctl bench`: vLLM's own benchmark against the deployment, judged by the SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ascendctl.cli.options import inventory_option, json_option, junit_option, serving_group_option

if TYPE_CHECKING:
    from ascendctl.inventory import Inventory

BENCH_EXIT_HELP = (
    "Exit codes: 0 every SLO in the inventory met (or none set), or with --quality the "
    "quality gate passed, or with --compare/--envelope/--soak/--long-tail that gate passed; "
    "1 an SLO missed, requests failed, the benchmark could not run or "
    "nothing is deployed, or with --quality the gate failed (a prompt's answer, the "
    "agreement, or nothing to agree with), or a promotion gate failed or could not "
    "measure; 2 bad input (nothing run); 4 the head node unreachable; 130 interrupted."
)


def bench(
    inventory: Path = inventory_option(),
    input_len: int = typer.Option(512, "--input-len", min=1,
                                  help="Prompt tokens per request (random dataset)."),
    output_len: int = typer.Option(256, "--output-len", min=1,
                                   help="Output tokens per request (generation ignores EOS)."),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1,
                                    help="Requests in flight at once (--max-concurrency)."),
    num_prompts: Optional[int] = typer.Option(
        None, "--num-prompts", "-n", min=1, help="Requests in total [default: 4 × concurrency]."),
    request_rate: Optional[float] = typer.Option(
        None, "--request-rate", min=0.001, help="Requests per second (Poisson) "
        "[default: all at once, bounded by --concurrency]."),
    timeout: float = typer.Option(3600.0, "--timeout", min=1.0, envvar="ASCENDCTL_BENCH_TIMEOUT",
                                  help="Give up on the benchmark after this many seconds."),
    junit: Optional[Path] = junit_option("one testcase per SLO; with --quality one per prompt"),
    as_json: bool = json_option(),
    quality: bool = typer.Option(
        False, "--quality", help="Run the quality gate alone against the serving release "
        "instead of the benchmark: slo.quality (or, when unset, agreement with the previous "
        "release over the built-in prompts); see docs/quality.md."),
    baseline: bool = typer.Option(
        False, "--baseline", help="With --quality: record the answers as the reference the "
        "next release must agree with, without comparing (when the previous release left "
        "no gate record)."),
    group: Optional[str] = serving_group_option(),
    compare: Optional[tuple[str, str]] = typer.Option(
        None, "--compare", metavar="REL_A REL_B",
        help="The regression gate alone: REL_B (served by a group's head) against REL_A, "
        "side by side when another group's head serves REL_A, else against REL_A's stored "
        "figures on the same profile (slo.promotion.profile, .rounds); see "
        "docs/promotion.md."),
    envelope: bool = typer.Option(
        False, "--envelope", help="The envelope gate alone: a concurrency sweep "
        "(slo.promotion.envelope.levels) on each group's head; the highest level whose "
        "latency SLOs held with nothing hung or failed is stored with the release."),
    soak: Optional[float] = typer.Option(
        None, "--soak", metavar="SECONDS", min=60,
        help="The soak gate alone, for SECONDS of traffic: no engine restart or recovery, "
        "HBM and RSS growth under the bounds, no stall."),
    long_tail: Optional[int] = typer.Option(
        None, "--long-tail", metavar="N", min=1,
        help="The long-tail gate alone with N requests: each answer checked for garbage "
        "and the prompt set's expectations; compared with the previous release's rate."),
) -> None:
    """Benchmark the deployment with vLLM's own `vllm bench serve`; judge it by the SLOs.

    The benchmark runs ON the head (the `vllm` next to serving.engine, the release's
    model directory as tokenizer, random prompts of --input-len tokens, --output-len
    tokens out), against the head's API on 127.0.0.1; the API key is read on the node
    from the release's 0600 secrets.env into the benchmark's environment, never passed
    as an argument. Output tokens/s per NPU = vLLM's output_throughput / (tensor ×
    pipeline × data parallel size). The result is stored on the head with the release
    (<deploy.root>/bench/<release>/) plus a `bench` event in history.jsonl, so
    `ascendctl history` compares releases.

    With --quality: the quality gate alone (see docs/quality.md): the inventory's prompt
    set at temperature 0 against the serving release, each answer checked against its
    expected answer, or compared token by token with the previous release's recorded
    answers; stored in <deploy.root>/quality/<release>/ and shown by `ascendctl history`.

    With several serving groups (replicas), each group's head is benchmarked (or gated) in turn and judged on its own; the exit code is the worst of them, and --junit writes one file per group (the second as FILE-stem.NODE.xml, ...). --group picks one.
    """
    from ascendctl.benchmark.report import bench_table, junit_report
    from ascendctl.benchmark.run import run_bench
    from ascendctl.benchmark.settings import BenchSettings, validate
    from ascendctl.console import get_console
    from ascendctl.errors import InputError
    from ascendctl.load import load_inventory
    from ascendctl.transport import SshPool

    if baseline and not quality:
        raise InputError("--baseline goes with --quality")
    compared = None if compare is None or None in compare else (compare[0], compare[1])
    gates = [name for name, asked in (("regression", compared is not None),
                                      ("envelope", envelope), ("soak", soak is not None),
                                      ("long_tail", long_tail is not None)) if asked]
    if len(gates) + quality > 1:
        raise InputError("--quality, --compare, --envelope, --soak and --long-tail each run "
                         "alone: give one of them")
    inv = load_inventory(inventory)
    views = [inv.group_view(group)] if group is not None else inv.group_views()
    if quality:
        quality_gate(inv, views, junit, as_json, baseline)
    if gates:
        promotion_gate(inv, views, gates[0], junit, as_json, compared=compared, soak_s=soak,
                       long_tail=long_tail)
    settings = validate(BenchSettings(input_len=input_len, output_len=output_len,
                                      concurrency=concurrency, num_prompts=num_prompts,
                                      request_rate=request_rate, timeout_s=timeout), inv)
    err = get_console(stderr=True)
    say = (lambda _msg: None) if as_json else (lambda msg: err.print(f"[dim]·[/dim] {msg}"))
    reports = []
    with SshPool([v.head for v in views]) as pool:   # unreachable: ConnectError, exit 4
        for view in views:
            reports.append(run_bench(view, settings, pool.conn(view.head.name), say))
    def show(out, report) -> None:
        out.print(bench_table(report))
        style = "green" if report.verdict.passed else "red"
        out.print(f"[{style}]{report.verdict.summary()}[/{style}]")

    report_groups(views, reports, junit, junit_report, as_json, show)


def quality_gate(inv: "Inventory", views: list["Inventory"], junit: Optional[Path],
                 as_json: bool, baseline: bool) -> None:
    """`bench --quality`: the gate against what each group's head serves now; exits 0 or 1
    (the worst of the groups)."""
    from rich.text import Text

    from ascendctl.console import get_console
    from ascendctl.quality.gate import run_quality_gate
    from ascendctl.quality.report import failure_lines, junit_report, quality_table
    from ascendctl.transport import SshPool

    err = get_console(stderr=True)
    say = (lambda _msg: None) if as_json else (lambda msg: err.print(f"[dim]·[/dim] {msg}"))
    reports = []
    with SshPool([v.head for v in views]) as pool:   # unreachable: ConnectError, exit 4
        for view in views:
            reports.append(run_quality_gate(inv, None, pool.conn(view.head.name),
                                            node=view.head, baseline=baseline, say=say))
    def show(out, report) -> None:
        out.print(quality_table(report))
        for line in failure_lines(report):
            out.print(line, markup=False, highlight=False)
        verdict = ("PASS:", "green") if report.passed else ("FAIL:", "red")
        out.print(Text.assemble(verdict, " ", report.summary()))

    report_groups(views, reports, junit, junit_report, as_json, show)


def promotion_gate(inv: "Inventory", views: list["Inventory"], gate: str,
                   junit: Optional[Path], as_json: bool, *,
                   compared: Optional[tuple[str, str]], soak_s: Optional[float],
                   long_tail: Optional[int]) -> None:
    """`bench --compare/--envelope/--soak/--long-tail`: one promotion gate against what the
    heads serve now; exits 0 or 1 (the worst group)."""
    import time

    from ascendctl.console import get_console
    from ascendctl.gates.bench import gate_contexts
    from ascendctl.gates.head import GateError
    from ascendctl.gates.report import PromotionReport, junit_report, lines
    from ascendctl.gates.runner import run_gates
    from ascendctl.inventory.promotion import DEFAULT_PROMOTION
    from ascendctl.errors import AscendctlError, InputError
    from ascendctl.transport import SshPool

    spec = inv.slo.promotion or DEFAULT_PROMOTION
    if soak_s is not None:
        if soak_s <= spec.stall_s:
            raise InputError(f"--soak {soak_s:g} must be longer than slo.promotion.stall_s "
                             f"{spec.stall_s:g}")
        spec = spec.model_copy(update={"soak_s": soak_s})
    if long_tail is not None:
        spec = spec.model_copy(update={"long_tail_requests": long_tail})
    err = get_console(stderr=True)
    say = (lambda _msg: None) if as_json else (lambda msg: err.print(f"[dim]·[/dim] {msg}"))
    reports = []
    shown = views
    with SshPool([h for v in inv.group_views() for h in v.hosts]) as pool:
        try:
            contexts = gate_contexts(inv, views, spec, pool, say, compared=compared)
        except GateError as error:
            raise AscendctlError(str(error)) from None
        shown = [c.inv for c in contexts]
        for context in contexts:
            started = time.time()
            try:
                ran = run_gates(context, [gate])
            except GateError as error:
                raise AscendctlError(f"{gate} could not measure: {error}") from None
            reports.append(PromotionReport(inv.cluster.name, ran, time.time() - started))

    def show(out, report) -> None:
        for line in lines(report):
            out.print(line, markup=False, highlight=False)

    report_groups(shown, reports, junit, junit_report, as_json, show)


def report_groups(views: list["Inventory"], reports: list, junit: Optional[Path],
                  junit_report, as_json: bool, show) -> None:
    """Write each group's report (JUnit, JSON or `show` under a group heading), then exit
    with the worst group's code."""
    from ascendctl.console import get_console, print_json

    if junit is not None:
        write_junit_files(junit_report, reports, junit)
    if as_json:
        print_json(reports[0].as_dict() if len(reports) == 1 else
                   {"groups": {v.serving_groups[0].name: r.as_dict()
                               for v, r in zip(views, reports)}})
    else:
        out = get_console()
        for view, report in zip(views, reports):
            if len(reports) > 1:
                out.print(f"[bold]serving group {view.serving_groups[0].name}[/bold]")
            show(out, report)
            out.print(f"stored on {report.node}: {report.stored}")
    raise typer.Exit(max(int(r.exit_code) for r in reports))


def write_junit_files(junit_report, reports: list, path: Path) -> None:
    """PATH for the first report; one more file per further group's report
    (PATH-stem.NODE.xml)."""
    from ascendctl.junit import write_junit

    for index, report in enumerate(reports):
        write_junit(junit_report(report), path if index == 0 else
                    path.with_name(f"{path.stem}.{report.node}{path.suffix}"))


def register(root: typer.Typer) -> None:
    root.command("bench", epilog=BENCH_EXIT_HELP)(bench)
