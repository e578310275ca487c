"""Show a preflight report: Rich tables per node (grouped by category) on a terminal,
plain aligned lines when piped. Both end with every failure and its fix."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from ascendctl.console import get_console, is_terminal

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
VERDICT = {"pass": "PASS", "warn": "WARNINGS", "fail": "FAILED", "unreachable": "UNREACHABLE"}


def _node_title(node: dict[str, Any]) -> str:
    if node["state"] == "ok":
        how = f"gathered in {node['gather_s']:.2f} s" if node.get("gather_s") is not None else "reached"
    elif node["state"] == "unreachable":
        how = f"UNREACHABLE: {node['error']}"
    else:
        how = f"gather failed: {node['error']}"
    return f"{node['name']} ({node['address']}, rank {node['rank']}): {how}"


def _summary(report: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in report["summary"].items())
    return (f"preflight {VERDICT[report['status']]} (exit {report['exit_code']}): {counts} "
            f"on {len(report['nodes'])} node(s) in {report['duration_s']:.2f} s")


def _failure_lines(report: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    return [(r, f"{r['node']}  {r['id']}  {r['status'].upper()}: {r['message']}")
            for r in report["results"] if r["status"] in ("fail", "warn")]


def print_plain(report: dict[str, Any], stream) -> None:
    by_node = {n: list(rs) for n, rs in groupby(report["results"], key=lambda r: r["node"])}
    width = max((len(r["id"]) for r in report["results"]), default=10)
    for node in report["nodes"]:
        stream.write(_node_title(node) + "\n")
        for note in node.get("allowed") or []:
            stream.write(f"  allowed (own units, re-deploy): {note}\n")
        for r in by_node.get(node["name"], []):
            stream.write(f"  {r['category']:<9} {r['id']:<{width}}  {r['status']:<4}  {r['message']}\n")
            if r["status"] in ("fail", "warn") and r.get("remediation"):
                stream.write(f"  {'':<9} {'':<{width}}        fix: {r['remediation']}\n")
        stream.write("\n")
    stream.write(_summary(report) + "\n")
    failures = _failure_lines(report)
    if failures:
        stream.write("\nTo fix:\n")
        for r, line in failures:
            stream.write(f"  {line}\n")
            if r.get("remediation"):
                stream.write(f"      fix: {r['remediation']}\n")


def print_rich(report: dict[str, Any], console) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    by_node = {n: list(rs) for n, rs in groupby(report["results"], key=lambda r: r["node"])}
    for node in report["nodes"]:
        style = "bold" if node["state"] == "ok" else "bold magenta"
        table = Table(title=Text(_node_title(node), style=style), title_justify="left",
                      expand=False, show_lines=False)
        table.add_column("category", style="cyan", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("result")
        first = True
        for category, rows in groupby(by_node.get(node["name"], []), key=lambda r: r["category"]):
            if not first:
                table.add_section()
            first = False
            for i, r in enumerate(rows):
                cell = Text(r["message"])
                if r["status"] in ("fail", "warn") and r.get("remediation"):
                    cell.append("\nfix: ", style="bold").append(r["remediation"], style="yellow")
                table.add_row(category if i == 0 else "", r["id"],
                              Text(r["status"], style=STYLE[r["status"]]), cell)
        console.print(table)
        for note in node.get("allowed") or []:
            console.print(f"  [dim]allowed (own units, re-deploy): {escape(note)}[/dim]")
    verdict_style = {"pass": "bold green", "warn": "bold yellow"}.get(report["status"], "bold red")
    console.print(Text(_summary(report), style=verdict_style))
    failures = _failure_lines(report)
    if failures:
        console.print("\n[bold]To fix:[/bold]")
        for r, line in failures:
            console.print(Text("  " + line, style=STYLE[r["status"]]))
            if r.get("remediation"):
                console.print(Text("      fix: " + r["remediation"], style="yellow"))


def print_report(report: dict[str, Any]) -> None:
    import sys

    if is_terminal(sys.stdout):
        print_rich(report, get_console())
    else:
        print_plain(report, sys.stdout)
