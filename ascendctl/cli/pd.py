"""`ascendctl pd check`: a prefill/decode layout checked against vllm-ascend's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ascendctl.cli.options import json_option, junit_option

PD_EXIT_CODES_HELP = (
    "Exit codes: 0 every layout passes (warnings may be printed); 1 a rule refuses a layout "
    "(it would fail at start-up or give wrong answers); 2 bad input (a file that is not a "
    "PD layout: the message names its file, line and field). Nothing is contacted."
)

pd_app = typer.Typer(help="Prefill/decode (PD) disaggregation: check a layout before launch "
                          "(docs/pd.md).", no_args_is_help=True)


@pd_app.command("check", epilog=PD_EXIT_CODES_HELP)
def check(files: list[Path] = typer.Argument(..., metavar="FILE...", help=(
              "PD layouts in vllm-ascend's formats: a multi-node test config (internal or "
              "external DP) or a recipe kept as data (docs/pd.md, *What it reads*).")),
          as_json: bool = json_option(),
          junit: Optional[Path] = junit_option("one per rule and file")) -> None:
    """Check each PD layout against every cross-node rule vllm-ascend documents (ports,
    DP ranks, engine ids, kv roles, connector sizes, speculative tokens, proxy flow, …)
    and its port ledger, node by node.

    Each finding reads `file:line: field: message [rule-id]`; `refuse` findings fail the
    check, `warn` findings are where vllm-ascend's own docs and configs disagree (both
    named). Nothing is contacted and no engine is started.
    """
    from ascendctl.console import print_json
    from ascendctl.pd.ledger import node_ledger
    from ascendctl.pd.rules import RULES, check_layout, refusals
    from ascendctl.pd.upstream import load_pd_layout

    results: list[dict[str, Any]] = []
    refused = 0
    for path in files:
        layout = load_pd_layout(path)
        findings = check_layout(layout)
        refused += len(refusals(findings))
        results.append({
            "file": str(path), "model": layout.model, "connector": layout.connector,
            "nodes": [{"index": n.index, "role": n.role, "npus": n.npus, "tp": n.tp_size,
                       "dp_local": n.dp_size_local, "dp_rank_start": n.dp_rank_start,
                       "ports": [{"owner": u.owner, "first": u.ports.start,
                                  "last": u.ports.stop - 1, "reserved": u.reserved}
                                 for u in node_ledger(layout, n)]}
                      for n in layout.nodes],
            "findings": [{"rule": f.rule, "severity": f.severity, "file": f.where.file,
                          "line": f.where.line, "field": f.field, "message": f.message}
                         for f in findings]})
        if not as_json:
            _print(path, layout, findings)
    if junit is not None:
        _write_junit(junit, results, [r.id for r in RULES])
    if as_json:
        print_json({"layouts": results, "refused": refused})
    if refused:
        raise typer.Exit(1)


def _print(path: Path, layout: Any, findings: list[Any]) -> None:
    parts = {role: [n for n in layout.nodes if n.role == role] for role in ("prefill", "decode")}
    shape = ", ".join(f"{role} {len(nodes)} node(s)" for role, nodes in parts.items())
    verdict = "refused" if any(f.severity == "refuse" for f in findings) else "passes"
    typer.echo(f"{path}: {layout.model}, {layout.connector}, {shape}: {verdict}")
    for finding in findings:
        typer.echo(f"  {finding.severity}: {finding}")


def _write_junit(path: Path, results: list[dict[str, Any]], rule_ids: list[str]) -> None:
    from ascendctl.junit import FAILURE, PASSED, Case, JUnitReport, Suite, write_junit

    suites = []
    for result in results:
        cases = []
        for rule_id in rule_ids:
            hits = [f for f in result["findings"] if f["rule"] == rule_id]
            refusing = [f for f in hits if f["severity"] == "refuse"]
            lines = [f"{f['file']}:{f['line']}: {f['field']}: {f['message']}" for f in hits]
            cases.append(Case(classname=result["file"], name=rule_id,
                              outcome=FAILURE if refusing else PASSED,
                              message=lines[0] if refusing else "",
                              kind="refused" if refusing else "",
                              text="\n".join(lines) or None))
        suites.append(Suite(name=f"pd check {result['file']}", cases=cases))
    write_junit(JUnitReport(name="ascendctl pd check", seconds=0.0, suites=suites), path)


def register(root: typer.Typer) -> None:
    root.add_typer(pd_app, name="pd")
