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


LABELS = {"date": "date", "vllm": "vLLM", "cann": "CANN", "torch": "torch",
          "torch_npu": "torch_npu", "torch_npu_builds": "  builds", "triton_ascend":
          "Triton-Ascend", "mooncake": "Mooncake", "nnal": "NNAL", "python": "Python",
          "image_python": "image Python", "hdk": "HDK", "images": "images", "scope": "scope",
          "tutorials": "tutorials"}


def _row_lines(row, matrix) -> list[str]:
    """One line per cell: label, value, its source ids; then the image stacks and the
    notes of unverified or disputed cells."""
    head = f"vllm-ascend {row.tag} ({row.date}{', pre-release' if row.prerelease else ''})"
    lines = [head]
    for cell, value, sources in row.cells(matrix.image_variants, matrix.image_repository):
        mark = " (unverified)" if cell in row.unverified else ""
        lines.append(f"  {LABELS[cell]:<14} {value}{mark}  [{', '.join(sources)}]")
    for stack in row.image_stacks:
        note = f" ({stack.note})" if stack.note else ""
        lines.append(f"  drift          {stack.describe()}{note}  [{', '.join(stack.sources)}]")
    for cell, note in row.notes.items():
        lines.append(f"  note {cell}: {note}")
    return lines


def _legend(rows, matrix) -> list[str]:
    ids = sorted({i for r in rows for ids in r.sources.values() for i in ids}
                 | {i for r in rows for s in r.image_stacks for i in s.sources})
    return ["sources:"] + [f"  {i}: {matrix.describe_source(i)}" for i in ids]


@app.command("release-set")
def release_set(
    version: Optional[str] = typer.Argument(
        None, help="A vllm-ascend release, e.g. v0.23.0 or 0.23.0.post1."),
    list_all: bool = typer.Option(False, "--list", help="List every release set."),
    as_json: bool = json_option(),
) -> None:
    """Print the versions a vllm-ascend release was validated with, what its images ship,
    what it claims to support and its tutorials' flags, each with its source."""
    from ascendctl.console import print_json
    from ascendctl.releases.sets import load_matrix
    from ascendctl.errors import InputError

    matrix = load_matrix()
    if list_all == (version is not None):
        raise InputError("give a release (e.g. v0.23.0) or --list", field="VERSION")
    if version is None:                  # --list (checked above)
        rows = list(matrix.releases)
    else:
        found = matrix.find(version.lstrip("vV"))
        if found is None:
            raise InputError(f"vllm-ascend {version[:40]} is in no release set (known: "
                             f"{matrix.known()})", field="VERSION")
        rows = [found]
    data = [r.to_dict(matrix.image_variants, matrix.image_repository, matrix.describe_source)
            for r in rows]
    if as_json:
        print_json(data if list_all else data[0])
        return
    lines: list[str] = []
    for row in rows:
        lines += _row_lines(row, matrix) + [""]
    typer.echo("\n".join(lines + _legend(rows, matrix)))


@app.command("identity")
def identity(inventory: Path = inventory_option(), as_json: bool = json_option()) -> None:
    """Print the identity of the inventory's engine (image ID read from the archive, or
    the wheelhouse's content hash) without contacting any host.

    A container engine without an archive is identified on the nodes at deploy time."""
    from ascendctl.console import print_json
    from ascendctl.engine.kinds import kind_of
    from ascendctl.load import load_inventory

    inv = load_inventory(inventory, check_files=False)
    ident = kind_of(inv.engine).identity(inv)
    if as_json:
        print_json(ident.to_dict())
    else:
        typer.echo(f"{ident.kind}: {ident.id} ({ident.short})")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="engine")
