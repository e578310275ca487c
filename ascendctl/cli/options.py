"""Options shared by many commands (one definition, same env variables everywhere)."""

from __future__ import annotations

import typer

INVENTORY_HELP = "Inventory file (Ansible-style YAML; see inventory.example.yaml)."


def inventory_option() -> typer.models.OptionInfo:
    return typer.Option(..., "-i", "--inventory", envvar="ASCENDCTL_INVENTORY",
                        help=INVENTORY_HELP, show_envvar=True)


def json_option() -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")
