"""`ascendctl node drain|undrain|list`: take a node out for maintenance without an outage,
and return it once it passes its checks (docs/faults.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option, yes_option

NODE_EXIT_HELP = (
    "Exit codes: 0 done; 1 the node fails its checks (undrain: it stays out) or its group "
    "did not leave / return to service in time; 2 bad input (an unknown node, no reason, "
    "the last serving group without --force): nothing done; 4 a node unreachable."
)

app = typer.Typer(help="Node maintenance: drain a node (its serving group leaves the gateway, "
                  "finishes its requests and stops; recovery and deploys keep off it), "
                  "list the nodes out of serving, undrain (re-check, then serve again).",
                  no_args_is_help=True)


def _say(as_json: bool):
    from ascendctl.console import get_console

    console = get_console(stderr=True)
    return (lambda _m: None) if as_json else (lambda m: console.print(f"  · {m}", markup=False))


def _finish(report, as_json: bool) -> None:
    from ascendctl.console import get_console, print_json

    if as_json:
        print_json(report.as_dict())
    elif report.ok:
        get_console().print(f"[green]{report.action} {report.node}: done[/green]")
    else:
        get_console().print(f"[red]{report.action} {report.node}: {report.error}[/red]")
    if not report.ok:
        raise typer.Exit(1)


@app.command("drain", epilog=NODE_EXIT_HELP)
def drain(
    node: str = typer.Argument(..., help="The node to take out (an inventory host name)."),
    reason: str = typer.Option(..., "--reason", "-r", help="Why (shown by status and "
                               "history, e.g. 'driver upgrade, ticket 4711')."),
    inventory: Path = inventory_option(),
    timeout: float = typer.Option(900.0, "--timeout", min=10.0, help="Seconds to wait for "
                                  "the group to leave the balancer, finish its requests and "
                                  "stop."),
    force: bool = typer.Option(False, "--force", help="Also drain the last serving group "
                               "(the service stops)."),
    yes: bool = yes_option(),
    as_json: bool = json_option(),
) -> None:
    """Take NODE's serving group out of service without failing a request: the gateway
    stops sending it new requests, its in-flight requests finish (at most
    deploy.rolling.drain_timeout), then its engines stop. Until `undrain`, recovery and
    deploys keep off it, and `status` and `history` say since when and why."""
    from ascendctl.cli.options import require_consent
    from ascendctl.load import load_inventory
    from ascendctl.maintenance import check_reason
    from ascendctl.maintenance import drain as run_drain

    inv = load_inventory(inventory)
    inv.host(node)
    reason = check_reason(reason)
    require_consent(yes, f"stop the serving engines of {inv.group_of(node).name} "
                         f"(node {node}) for maintenance?")
    _finish(run_drain(inv, node, reason, timeout=timeout, say=_say(as_json), force=force),
            as_json)


@app.command("undrain", epilog=NODE_EXIT_HELP)
def undrain(
    node: str = typer.Argument(..., help="The node to return."),
    inventory: Path = inventory_option(),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=10.0, help="Seconds to "
                                            "wait until the group serves again (default: "
                                            "serving.startup_timeout + 120)."),
    as_json: bool = json_option(),
) -> None:
    """Return NODE to serving: first its read-only preflight checks (a node that fails them
    stays out, and the failures are listed), then its group starts in rank order and the
    gateway takes it back once its head answers."""
    from ascendctl.load import load_inventory
    from ascendctl.maintenance import undrain as run_undrain
    from ascendctl.preflight.model_size import model_source_bytes
    from ascendctl.preflight.run import PreflightRequest, run_preflight

    inv = load_inventory(inventory)
    inv.host(node)

    def checks(name: str) -> dict:
        report, _run = run_preflight(inv, PreflightRequest(limit=name,
                                                           model_bytes=model_source_bytes(inv)))
        return report

    wait = timeout if timeout is not None else inv.serving.startup_timeout + 120.0
    _finish(run_undrain(inv, node, timeout=wait, run_checks=checks, say=_say(as_json)),
            as_json)


@app.command("list", epilog=NODE_EXIT_HELP)
def list_nodes(
    inventory: Path = inventory_option(),
    as_json: bool = json_option(),
) -> None:
    """Every node's maintenance state: serving, drained or isolated, since when, by whom
    and why (with the fault's evidence when the policy did it)."""
    from ascendctl.console import get_console, print_json
    from ascendctl.load import load_inventory
    from ascendctl.maintenance import show_all

    inv = load_inventory(inventory)
    records = show_all(inv)
    unreachable = [h.name for h in inv.hosts if h.name not in records]
    if as_json:
        print_json({"cluster": inv.cluster.name, "nodes": records, "unreachable": unreachable})
    else:
        from rich.table import Table

        from ascendctl.status.maintenance import describe

        table = Table(title=f"nodes of {inv.cluster.name}")
        for column in ("node", "group", "state", "since / why"):
            table.add_column(column)
        for host in inv.hosts:
            record = records.get(host.name)
            state = "unreachable" if host.name in unreachable else \
                (record or {}).get("state", "serving")
            table.add_row(host.name, inv.group_of(host).name, state,
                          describe(record) if record else "")
        get_console().print(table)
    if unreachable:
        raise typer.Exit(4)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="node")
