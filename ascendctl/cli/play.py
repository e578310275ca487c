"""`ascendctl play PLAYBOOK -i INVENTORY`: run any playbook."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP


def _split_tags(values: Optional[List[str]]) -> frozenset[str]:
    return frozenset(t.strip() for v in values or [] for t in v.split(",") if t.strip())


def _extra_vars(values: Optional[List[str]]) -> dict:
    from ascendctl.errors import InputError

    extra: dict = {}
    for item in values or []:
        if item.startswith("@"):
            import yaml

            try:
                data = yaml.safe_load(Path(item[1:]).read_text())
            except (OSError, yaml.YAMLError) as err:
                raise InputError(f"cannot read extra vars: {err}", file=item[1:]) from None
            if not isinstance(data, dict):
                raise InputError("extra vars file must be a mapping", file=item[1:])
            extra.update(data)
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise InputError(f"{item!r}: use NAME=VALUE or @file.yaml", field="--extra-vars")
        extra[key] = value
    return extra


def play(
    playbook: Path = typer.Argument(..., help="Playbook file (or a name from playbooks/)."),
    inventory: Path = inventory_option(),
    check: bool = typer.Option(False, "--check", "-C",
                               help="Change nothing; show what would change (with diffs)."),
    diff: bool = typer.Option(False, "--diff", "-D", help="Show diffs of changed files."),
    limit: Optional[str] = typer.Option(None, "--limit", "-l",
                                        help="Only these hosts (pattern: node0,node1 / "
                                        "'nodes:!node3')."),
    tags: Optional[List[str]] = typer.Option(None, "--tags", "-t",
                                             help="Only tasks with these tags (comma list)."),
    skip_tags: Optional[List[str]] = typer.Option(None, "--skip-tags",
                                                  help="Skip tasks with these tags."),
    list_tasks: bool = typer.Option(False, "--list-tasks",
                                    help="List the plays and tasks that would run; "
                                    "contact nothing."),
    forks: int = typer.Option(16, "--forks", "-f", min=1, max=1024,
                              help="Hosts worked on in parallel."),
    extra_vars: Optional[List[str]] = typer.Option(None, "--extra-vars", "-e",
                                                   help="NAME=VALUE or @vars.yaml "
                                                   "(highest precedence)."),
    yes: bool = typer.Option(False, "--yes", "-y",
                             help="Answer yes to plays that ask for confirmation."),
    connect_timeout: Optional[float] = typer.Option(
        None, "--connect-timeout", min=0.1,
        help="Override the inventory's ssh.connect_timeout (seconds)."),
    junit: Optional[Path] = typer.Option(None, "--junit",
                                         help="Also write JUnit XML here (one testcase per "
                                         "task and host)."),
    as_json: bool = json_option(),
) -> None:
    """Run a playbook: plays of tasks on the inventory's hosts over one SSH connection each.

    Reports ok/changed/failed/skipped per task and host and a recap. Exit 0 when every
    task succeeded, 1 when a task failed, 4 when a host was unreachable, 130 on Ctrl-C.
    """
    import sys

    from ascendctl.console import get_console, is_terminal, print_json
    from ascendctl.inventory import load_inventory
    from ascendctl.playbook import PlaybookRunner, RunOptions, load_playbook, templar_for
    from ascendctl.playbook.reporting import ConsoleReporter, Reporter, list_tasks as show_tasks
    from ascendctl.playbook.reporting import write_junit

    inv = load_inventory(inventory)
    book = load_playbook(playbook)

    def ask(question: str) -> bool:
        return typer.confirm(question, default=False, err=True)

    interactive = is_terminal(sys.stdin) and is_terminal(sys.stderr) and not as_json
    options = RunOptions(
        check=check, diff=diff, limit=limit, tags=_split_tags(tags),
        skip_tags=_split_tags(skip_tags), forks=forks, extra_vars=_extra_vars(extra_vars),
        yes=yes, confirm=ask if interactive else None, connect_timeout=connect_timeout)
    reporter = Reporter() if as_json else ConsoleReporter(show_diff=diff, check=check)
    runner = PlaybookRunner(book, inv, options, reporter, templar_for(book.path))
    if list_tasks:
        planned = runner.plan(for_run=False)
        if as_json:
            from ascendctl.playbook.runner import task_selected

            print_json({"playbook": str(book.path), "plays": [
                {"name": p.name, "hosts": [h.name for h in hosts], "order": p.order,
                 "tasks": [{"name": t.name, "module": t.module, "tags": sorted(t.tags | p.tags)}
                           for t in p.tasks if task_selected(t, p, options)],
                 "handlers": [h.name for h in p.handlers]} for p, hosts in planned]})
        else:
            show_tasks(planned, options, get_console())
        return
    report = runner.run()
    if junit is not None:
        write_junit(report, junit)
    if as_json:
        print_json(report.as_dict())
    raise typer.Exit(int(report.exit_code()))


def register(root: typer.Typer) -> None:
    root.command("play", epilog=EXIT_CODES_HELP)(play)
