"""`ascendctl events`: what happened to the cluster, newest last — deploys, rollbacks,
failed releases, benchmarks and every gang recovery with its cause (the head's
history.jsonl; the supervisor writes the recoveries there and to its journal)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP


def events(
    inventory: Path = inventory_option(),
    tail: int = typer.Option(50, "--tail", "-n", min=1, max=100000,
                             help="Show the last N events."),
    kind: Optional[str] = typer.Option(None, "--kind", help="Only events of this kind "
                                       "(recovery, deployed, rollback, failed, bench)."),
    as_json: bool = json_option(),
) -> None:
    """The cluster's events, newest last: deploys, rollbacks, failed releases, benchmarks,
    and every recovery of the serving group (started with its cause, attempts that failed,
    retries with their back-off, recovered after how long, gave up and why)."""
    from ascendctl.console import get_console, print_json
    from ascendctl.status.events import events_table, read_events
    from ascendctl.exitcodes import Exit
    from ascendctl.load import load_inventory

    inv = load_inventory(inventory)
    try:
        found = read_events(inv, tail=tail if kind is None else 100000)
    except ConnectionError as err:
        typer.echo(f"{inv.head.name} unreachable: {err}", err=True)
        raise typer.Exit(int(Exit.UNREACHABLE)) from None
    if kind is not None:
        found = [e for e in found if e.get("event") == kind][-tail:]
    if as_json:
        print_json({"cluster": inv.cluster.name, "events": found})
        return
    get_console().print(events_table(inv.cluster.name, found))


def register(root: typer.Typer) -> None:
    root.command("events", epilog=EXIT_CODES_HELP)(events)
