"""`ascendctl engine ...`: the release sets and the engine's identity."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

app = typer.Typer(help="The serving engine: vllm-ascend release sets (which vLLM, CANN, "
                       "torch_npu, HDK and Python go together) and the engine an inventory "
                       "deploys.", no_args_is_help=True, epilog=EXIT_CODES_HELP)


@app.command("release-set")
def release_set(
    version: Optional[str] = typer.Argument(
        None, help="A vllm-ascend release, e.g. v0.23.0 or 0.23.0.post1."),
    list_all: bool = typer.Option(False, "--list", help="List every release set."),
    as_json: bool = json_option(),
) -> None:
    """Print the versions a vllm-ascend release was validated with, and its images."""
    from ascendctl.console import print_json
    from ascendctl.engine.releases import describe_row, load_matrix
    from ascendctl.errors import InputError

    matrix = load_matrix()
    if list_all == (version is not None):
        raise InputError("give a release (e.g. v0.23.0) or --list", field="VERSION")
    if version is None:                  # --list (checked above)
        rows = list(matrix.releases)
    else:
        found = matrix.find(version.lstrip("vV"))
        if found is None:
            raise InputError(f"vllm-ascend {version} is in no release set (known: "
                             f"{matrix.known()})", field="VERSION")
        rows = [found]
    data = [r.to_dict(matrix.image_variants, matrix.image_repository) for r in rows]
    if as_json:
        print_json(data if list_all else data[0])
        return
    if list_all:
        for row in rows:
            typer.echo(describe_row(row) + (" (pre-release)" if row.prerelease else ""))
        return
    row, info = rows[0], data[0]
    unverified = " (unverified: " + info["hdk"]["note"] + ")" if row.hdk.unverified else ""
    lines = [f"vllm-ascend {row.tag} ({row.date}{', pre-release' if row.prerelease else ''})",
             f"  vLLM           {row.vllm}", f"  CANN           {row.cann}",
             f"  torch          {row.torch}", f"  torch_npu      {row.torch_npu}",
             f"  Triton-Ascend  {row.triton_ascend or '-'}",
             f"  NNAL           {row.nnal or '-'}",
             f"  HDK            {row.hdk.version or '-'}{unverified}",
             f"  Python         {row.python_text} (images: {row.image_python or '-'})",
             "  images" + (" (tag scheme, not seen for this release)"
                           if row.images_unverified else "")]
    lines += [f"    {variant:<15} {image}" for variant, image in info["images"].items()]
    lines.append("  sources: " + ", ".join(row.sources) + " (see release_sets.yaml)")
    typer.echo("\n".join(lines))


@app.command("identity")
def identity(inventory: Path = inventory_option(), as_json: bool = json_option()) -> None:
    """Print the identity of the inventory's engine (image ID read from the archive, or
    the wheelhouse's content hash) without contacting any host.

    A container engine without an archive is identified on the nodes at deploy time."""
    from ascendctl.console import print_json
    from ascendctl.engine.kinds import kind_of
    from ascendctl.inventory import load_inventory

    inv = load_inventory(inventory, check_files=False)
    ident = kind_of(inv.engine).identity(inv)
    if as_json:
        print_json(ident.to_dict())
    else:
        typer.echo(f"{ident.kind}: {ident.id} ({ident.short})")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="engine")
