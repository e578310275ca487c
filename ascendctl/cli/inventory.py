"""`ascendctl inventory check|show`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

app = typer.Typer(help="Validate and inspect an inventory (nothing is contacted).",
                  no_args_is_help=True, epilog=EXIT_CODES_HELP)


@app.command("check")
def check(inventory: Path = inventory_option(), as_json: bool = json_option()) -> None:
    """Validate the inventory: schema, ranks, device IPs, layout, key files, and the
    vLLM options, additional_config keys and engine variables against the pinned
    versions.vllm_ascend release.

    On error prints one line `FILE:LINE: FIELD: problem` and exits 2; what the engine
    would silently ignore is printed as `warning: FILE:LINE: FIELD: ...` on stderr.
    """
    from ascendctl.console import print_json
    from ascendctl.drift import option_warnings
    from ascendctl.load import load_inventory
    from ascendctl.pd.inventory import pd_warnings

    inv = load_inventory(inventory)
    warnings = option_warnings(inv) + pd_warnings(inv)
    if as_json:
        print_json({"ok": True, "inventory": str(inv.path), "hosts": inv.host_names,
                    "warnings": warnings})
    else:
        for warning in warnings:
            typer.echo(f"warning: {warning}", err=True)
        typer.echo(f"{inv.path}: ok — {len(inv.hosts)} hosts ({', '.join(inv.host_names)}), "
                   f"{inv.serving.mode} mode, head {inv.head.name}")


@app.command("show")
def show(inventory: Path = inventory_option(),
         host: Optional[str] = typer.Option(None, "--host", help="Show only this host."),
         as_json: bool = json_option()) -> None:
    """Print the resolved values (group and host variables merged; secrets redacted)."""
    from ascendctl.console import print_json
    from ascendctl.load import load_inventory

    data = load_inventory(inventory).public_dict(host=host)
    if as_json:
        print_json(data)
        return
    import yaml

    typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100),
               nl=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="inventory")
