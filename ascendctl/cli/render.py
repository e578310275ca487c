"""`ascendctl render`: write every rendered file to a directory, for review or diffing."""

from __future__ import annotations

from pathlib import Path

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

DEFAULT_RELEASE_ID = "rendered"


def render(inventory: Path = inventory_option(),
           out: Path = typer.Option(..., "--out", help="Directory to write DIR/<node>/... "
                                    "and DIR/cluster/... into."),
           release_id: str = typer.Option(DEFAULT_RELEASE_ID, "--release-id",
                                          help="Release id used in the rendered paths."),
           show_secrets: bool = typer.Option(
               False, "--show-secrets", help="Resolve serving.api_key (env or file on this "
               "machine) into secrets.env; otherwise a placeholder is written."),
           as_json: bool = json_option()) -> None:
    """Render hccl.json, engine config and environment, systemd units, nginx and
    Prometheus files. The same inventory gives byte-identical files. Nothing is contacted;
    secret files are mode 0600 and redacted unless --show-secrets."""
    from ascendctl.console import print_json
    from ascendctl.inventory import load_inventory
    from ascendctl.render import render_cluster, render_release, render_warnings, write_files
    from ascendctl.render.secrets import resolve_secrets

    inv = load_inventory(inventory, check_files=False)
    warnings = render_warnings(inv)
    secrets = resolve_secrets(inv) if show_secrets else None
    nodes = render_release(inv, release_id=release_id, secrets=secrets)
    written: dict[str, list[str]] = {}
    for node, files in nodes.items():
        written[node] = [str(p) for p in write_files(out / node, files)]
    written["cluster"] = [str(p) for p in write_files(out / "cluster", render_cluster(inv))]
    if as_json:
        print_json({"out": str(out), "release_id": release_id, "files": written,
                    "warnings": warnings, "secrets_shown": show_secrets})
        return
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    total = sum(len(v) for v in written.values())
    typer.echo(f"{out}: {total} files for {len(nodes)} node(s) and the cluster "
               f"(release id {release_id}{'' if show_secrets else ', secrets redacted'})")


def register(root: typer.Typer) -> None:
    root.command("render", epilog=EXIT_CODES_HELP)(render)
