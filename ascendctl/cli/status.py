"""`ascendctl status`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option

STATUS_EXIT_HELP = (
    "Exit codes: 0 healthy; 3 degraded (serving, with NPU/RoCE/unit problems); 1 down "
    "(not serving or not deployed); 2 bad input; 4 a node unreachable."
)


def status(
    inventory: Path = inventory_option(),
    watch: Optional[float] = typer.Option(None, "--watch", "-w", min=1.0,
                                          help="Refresh every SECONDS until Ctrl-C."),
    forks: int = typer.Option(64, "--forks", "-f", min=1, envvar="ASCENDCTL_FORKS",
                              help="Nodes queried in parallel."),
    as_json: bool = json_option(),
) -> None:
    """Per node: unit states, release, NPU health / HBM / utilisation / temperature, RoCE
    link states; on the head the engine's metrics (requests running and waiting, KV
    cache usage, token counters); and one verdict for the cluster."""
    from ascendctl.console import get_console, print_json
    from ascendctl.inventory import load_inventory
    from ascendctl.status import collect
    from ascendctl.status.view import status_table
    from ascendctl.transport import SshPool

    inv = load_inventory(inventory)
    console = get_console()
    with SshPool(inv.hosts, forks=forks) as pool:
        if watch is None:
            result = collect(inv, pool)
            if as_json:
                print_json(result.to_dict())
            else:
                console.print(status_table(result))
            raise typer.Exit(int(result.exit_code))
        _watch(inv, pool, watch, as_json, console)


def _watch(inv, pool, seconds: float, as_json: bool, console) -> None:
    import time

    from rich.live import Live

    from ascendctl.console import print_json
    from ascendctl.status import collect
    from ascendctl.status.view import status_table

    try:
        if as_json or not console.is_terminal:
            while True:  # one JSON document (or table) per refresh
                result = collect(inv, pool)
                print_json(result.to_dict()) if as_json else console.print(status_table(result))
                time.sleep(seconds)
        with Live(console=console, auto_refresh=False) as live:
            while True:
                live.update(status_table(collect(inv, pool)), refresh=True)
                time.sleep(seconds)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(root: typer.Typer) -> None:
    root.command("status", epilog=STATUS_EXIT_HELP)(status)
