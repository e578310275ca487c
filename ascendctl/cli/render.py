"""`ascendctl render`: write every rendered file to a directory, for review or diffing."""

from __future__ import annotations

from pathlib import Path

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

DEFAULT_RELEASE_ID = "rendered"
NAMED_FILES_MAX = 4     # cleartext secret files named one by one on stderr


def render(inventory: Path = inventory_option(),
           out: Path = typer.Option(..., "--out", help="Directory to write DIR/<node>/... "
                                    "and DIR/cluster/... into."),
           release_id: str = typer.Option(DEFAULT_RELEASE_ID, "--release-id",
                                          help="Release id used in the rendered paths."),
           show_secrets: bool = typer.Option(
               False, "--show-secrets", help="Write the secrets in CLEARTEXT: resolve "
               "serving.api_key and serving.health.token (env or file on this machine) "
               "into each node's secrets.env, mode 0600; stderr names every file that "
               "holds one. Without it, placeholders are written."),
           as_json: bool = json_option()) -> None:
    """Render hccl.json, engine config and environment, systemd units, nginx and
    Prometheus files. The same inventory gives byte-identical files. Nothing is contacted;
    secret files are mode 0600 and hold placeholders unless --show-secrets."""
    from ascendctl.console import print_json
    from ascendctl.load import load_inventory
    from ascendctl.render import render_cluster, render_release, render_warnings, write_files
    from ascendctl.render.secrets import resolve_secrets

    inv = load_inventory(inventory, check_files=False)
    warnings = render_warnings(inv)
    secrets = resolve_secrets(inv) if show_secrets else None
    nodes = render_release(inv, release_id=release_id, secrets=secrets)
    written: dict[str, list[str]] = {}
    cleartext: list[Path] = []
    for node, files in nodes.items():
        written[node] = [str(p) for p in write_files(out / node, files)]
        if show_secrets:
            cleartext += [out / node / f.path for f in files if f.secret]
    written["cluster"] = [str(p) for p in write_files(out / "cluster", render_cluster(inv))]
    if show_secrets:
        # on stderr even with --json: nobody should miss that keys now sit on this disk
        typer.echo(cleartext_notice(out, cleartext), err=True)
    if as_json:
        print_json({"out": str(out), "release_id": release_id, "files": written,
                    "warnings": warnings, "secrets_shown": show_secrets,
                    "cleartext_secret_files": [str(p) for p in cleartext]})
        return
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    total = sum(len(v) for v in written.values())
    how = "secrets in cleartext" if show_secrets else "secrets redacted"
    typer.echo(f"{out}: {total} files for {len(nodes)} node(s) and the cluster "
               f"(release id {release_id}, {how})")


def cleartext_notice(out: Path, paths: list[Path]) -> str:
    """One line naming the files --show-secrets filled (bounded: a large cluster's files
    are named by their pattern)."""
    if not paths:
        return ("note: --show-secrets: the inventory references no secret; no file holds "
                "one in cleartext")
    names = {p.relative_to(out).parts[1:] for p in paths}
    if len(paths) <= NAMED_FILES_MAX:
        where = ", ".join(map(str, paths))
    elif len(names) == 1:
        where = f"{out}/<node>/{'/'.join(next(iter(names)))} on each of the nodes"
    else:
        where = (", ".join(map(str, paths[:NAMED_FILES_MAX])) +
                 f" and {len(paths) - NAMED_FILES_MAX} more")
    return (f"warning: --show-secrets: {len(paths)} file(s) hold secrets in cleartext, "
            f"written 0600: {where}")


def register(root: typer.Typer) -> None:
    root.command("render", epilog=EXIT_CODES_HELP)(render)
