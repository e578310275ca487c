"""Options shared by many commands: each defined once, with one default and one
environment variable, so `--forks` means the same thing everywhere."""

from __future__ import annotations

import os

import typer

INVENTORY_HELP = "Inventory file (Ansible-style YAML; see inventory.example.yaml)."
DEFAULT_FORKS = 16
DEFAULT_LAB_NAME = "lab"


def inventory_option() -> typer.models.OptionInfo:
    return typer.Option(..., "-i", "--inventory", envvar="ASCENDCTL_INVENTORY",
                        help=INVENTORY_HELP, show_envvar=True)


def json_option() -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def junit_option(cases: str = "") -> typer.models.OptionInfo:
    """`cases`: what one testcase is, for the help (e.g. "one per check and node")."""
    detail = f" ({cases})" if cases else ""
    return typer.Option(None, "--junit", metavar="FILE",
                        help=f"Also write JUnit XML here, for CI{detail}.")


def forks_option() -> typer.models.OptionInfo:
    return typer.Option(DEFAULT_FORKS, "--forks", "-f", min=1, max=1024,
                        envvar="ASCENDCTL_FORKS", show_envvar=True,
                        help="Nodes worked on in parallel.")


def yes_option() -> typer.models.OptionInfo:
    return typer.Option(False, "--yes", "-y", envvar="ASCENDCTL_YES", show_envvar=True,
                        help="Do not ask before stopping or restarting serving engines "
                             "(required without a terminal).")


def check_option() -> typer.models.OptionInfo:
    return typer.Option(False, "--check", "-C", help="Show what would change; touch nothing.")


def diff_option() -> typer.models.OptionInfo:
    return typer.Option(False, "--diff", "-D", help="Show diffs of changed files.")


def limit_option() -> typer.models.OptionInfo:
    return typer.Option(None, "--limit", "-l",
                        help="Only these hosts (pattern: node0,node1 or 'all:!node3').")


def lab_name_option() -> typer.models.OptionInfo:
    return typer.Option(default_lab_name(), "--name", envvar="ASCENDCTL_LAB_NAME",
                        show_envvar=True, help="Lab name; labs with different names coexist.")


def default_lab_name() -> str:
    return os.environ.get("ASCENDCTL_LAB_NAME", DEFAULT_LAB_NAME)


def serving_group_option() -> typer.models.OptionInfo:
    return typer.Option(None, "--group", "-g", envvar="ASCENDCTL_SERVING_GROUP",
                        show_envvar=True,
                        help="Only this serving group (replica) of the inventory [default: "
                             "every group, one after another].")


def require_consent(yes: bool, question: str) -> None:
    """Ask QUESTION on a terminal unless --yes; without a terminal, --yes is required
    (exit 2, nothing done)."""
    import sys

    from ascendctl.console import is_terminal
    from ascendctl.errors import InputError

    if yes:
        return
    if not (is_terminal(sys.stdin) and is_terminal(sys.stderr)):
        raise InputError(f"{question} — no terminal to ask: give --yes (or ASCENDCTL_YES=1)",
                         field="--yes")
    from ascendctl.cli.playrun import ask

    if not ask(question):
        raise typer.Exit(1)
