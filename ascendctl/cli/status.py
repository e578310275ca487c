"""`ascendctl status`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import forks_option, inventory_option, json_option
from ascendctl.exitcodes import STATUS_EXIT_CODES_HELP


def status(
    inventory: Path = inventory_option(),
    watch: Optional[float] = typer.Option(None, "--watch", "-w", min=1.0,
                                          help="Refresh every SECONDS until Ctrl-C."),
    probe_timeout: float = typer.Option(
        5.0, "--probe-timeout", min=0.5, max=600, envvar="ASCENDCTL_STATUS_PROBE_TIMEOUT",
        show_envvar=True, help="Seconds the deep probe (a 1-token completion on the head) "
        "may take before serving counts as down."),
    connect_timeout: float = typer.Option(
        5.0, "--connect-timeout", min=0.5, max=600, envvar="ASCENDCTL_STATUS_CONNECT_TIMEOUT",
        show_envvar=True, help="Seconds an SSH connect may take before the node counts as "
        "unreachable (shorter than ssh.connect_timeout: a dead node must show quickly)."),
    forks: int = forks_option(),
    as_json: bool = json_option(),
) -> None:
    """Is the cluster serving? Proven by a real 1-token completion through the API key on
    the head (never by /health). Per node and rank: the engine's state (running, crashed,
    stopped, not started since boot; since when; restarts by recovery), the other units,
    release, NPU health / HBM / utilisation / temperature and foreign processes on the NPUs,
    RoCE links; on the head the engine's metrics and the gang supervisor's state (recovery
    under way, attempts, gave up). One verdict: healthy, degraded or down, with reasons that
    name the node and rank."""
    from ascendctl.console import get_console, print_json
    from ascendctl.load import load_inventory
    from ascendctl.status import collect
    from ascendctl.status.view import status_table
    from ascendctl.transport import SshPool

    inv = load_inventory(inventory)
    console = get_console()
    connect = min(connect_timeout, min(h.ssh.connect_timeout for h in inv.hosts))
    with SshPool(inv.hosts, forks=forks, connect_timeout=connect) as pool:
        if watch is None:
            result = collect(inv, pool, probe_timeout=probe_timeout)
            if as_json:
                print_json(result.to_dict())
            else:
                console.print(status_table(result))
            raise typer.Exit(int(result.exit_code))
        _watch(inv, pool, watch, probe_timeout, as_json, console)


def _watch(inv, pool, seconds: float, probe_timeout: float, as_json: bool, console) -> None:
    import time

    from rich.live import Live

    from ascendctl.console import print_json
    from ascendctl.status import collect
    from ascendctl.status.view import status_table

    try:
        if as_json or not console.is_terminal:
            while True:  # one JSON document (or table) per refresh
                result = collect(inv, pool, probe_timeout=probe_timeout)
                print_json(result.to_dict()) if as_json else console.print(status_table(result))
                time.sleep(seconds)
        with Live(console=console, auto_refresh=False) as live:
            while True:
                live.update(status_table(collect(inv, pool, probe_timeout=probe_timeout)),
                            refresh=True)
                time.sleep(seconds)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(root: typer.Typer) -> None:
    root.command("status", epilog=STATUS_EXIT_CODES_HELP)(status)
