"""`ascendctl play PLAYBOOK -i INVENTORY`: run any playbook."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.cli.options import (
    check_option, diff_option, forks_option, inventory_option, json_option, junit_option,
    limit_option, yes_option,
)
from ascendctl.exitcodes import EXIT_CODES_HELP


def _extra_vars(values: Optional[List[str]]) -> dict:
    from ascendctl.errors import InputError
    from ascendctl.inventory.inputfile import shown

    extra: dict = {}
    for item in values or []:
        if item.startswith("@"):
            extra.update(_extra_vars_file(Path(item[1:])))
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise InputError(f"{shown(item)}: use NAME=VALUE or @file.yaml",
                             field="--extra-vars")
        extra[key] = value
    return extra


def _extra_vars_file(path: Path) -> dict:
    """A YAML mapping of NAME: value, read the bounded way (a regular file, size, depth,
    aliases), every error `file:line: message`."""
    from ascendctl.errors import InputError
    from ascendctl.inventory.inputfile import shown
    from ascendctl.inventory.yamlsrc import load_yaml_with_lines

    data, source = load_yaml_with_lines(path, what="extra vars file")
    if not isinstance(data, dict):
        raise InputError("extra vars file must be a mapping of NAME: value", file=str(path),
                         line=source.line_of(()))
    for key in data:
        if not isinstance(key, str) or not key.isidentifier():
            raise InputError(f"extra var name {shown(key)}: use letters, digits and _",
                             file=str(path), line=source.line_of((key,)))
    return data


def play(
    playbook: Path = typer.Argument(..., help="Playbook file (or a name from playbooks/)."),
    inventory: Path = inventory_option(),
    check: bool = check_option(),
    diff: bool = diff_option(),
    limit: Optional[str] = limit_option(),
    tags: Optional[List[str]] = typer.Option(None, "--tags", "-t",
                                             help="Only tasks with these tags (comma list)."),
    skip_tags: Optional[List[str]] = typer.Option(None, "--skip-tags",
                                                  help="Skip tasks with these tags."),
    list_tasks: bool = typer.Option(False, "--list-tasks",
                                    help="List the plays and tasks that would run; "
                                    "contact nothing."),
    forks: int = forks_option(),
    extra_vars: Optional[List[str]] = typer.Option(None, "--extra-vars", "-e",
                                                   help="NAME=VALUE or @vars.yaml "
                                                   "(highest precedence)."),
    yes: bool = yes_option(),
    connect_timeout: Optional[float] = typer.Option(
        None, "--connect-timeout", min=0.1,
        help="Override the inventory's ssh.connect_timeout (seconds)."),
    junit: Optional[Path] = junit_option(),
    as_json: bool = json_option(),
) -> None:
    """Run a playbook: plays of tasks on the inventory's hosts over one SSH connection each.

    Reports ok/changed/failed/skipped per task and host and a recap. Exit 0 when every task succeeded, 1 when a task failed, 4 when a host was unreachable, 130 on Ctrl-C. Plays marked `rescue: true` run only after a failure, `always: true` plays whatever happened (docs/playbooks.md).
    """
    from ascendctl.cli.playrun import PlayCommand, run_playbook_command, split_tags
    from ascendctl.console import print_json
    from ascendctl.load import load_inventory
    from ascendctl.playbook import RunOptions

    inv = load_inventory(inventory)
    command = PlayCommand(
        RunOptions(check=check, diff=diff, limit=limit, tags=split_tags(tags),
                   skip_tags=split_tags(skip_tags), forks=forks,
                   extra_vars=_extra_vars(extra_vars), yes=yes,
                   connect_timeout=connect_timeout),
        as_json=as_json, junit=junit)
    if list_tasks:
        from ascendctl.cli.playrun import list_playbook_tasks

        list_playbook_tasks(playbook, inv, command)
        return
    report = run_playbook_command(playbook, inv, command)
    if as_json:
        print_json(report.as_dict())
    raise typer.Exit(int(report.exit_code()))


def register(root: typer.Typer) -> None:
    root.command("play", epilog=EXIT_CODES_HELP)(play)
