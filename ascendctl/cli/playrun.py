"""Running a playbook from a command: options, reporter, JUnit and JSON in one place."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

if TYPE_CHECKING:
    from ascendctl.playbook import RunOptions


@dataclass
class PlayCommand:
    """What every playbook-running command takes from its command line: the runner's
    options, and how to report (the runner's `confirm` is set here, for a terminal)."""

    options: RunOptions
    as_json: bool = False
    junit: Optional[Path] = None


def split_tags(values: Optional[list[str]]) -> frozenset[str]:
    """`-t a,b -t c` → {a, b, c}."""
    return frozenset(t.strip() for v in values or [] for t in v.split(",") if t.strip())


def ask(question: str) -> bool:
    """The one place the CLI asks a question (only on a terminal: callers check)."""
    return typer.confirm(question, default=False, err=True)


def _runner(book_path: Path, inv: Any, command: PlayCommand, run_state: Any = None) -> Any:
    from ascendctl.console import is_terminal
    from ascendctl.playbook import PlaybookRunner, load_playbook, templar_for
    from ascendctl.playbook.reporting import ConsoleReporter, Reporter

    book = load_playbook(book_path)
    interactive = is_terminal(sys.stdin) and is_terminal(sys.stderr) and not command.as_json
    options = dataclasses.replace(command.options, confirm=ask if interactive else None)
    reporter = Reporter() if command.as_json else ConsoleReporter(show_diff=options.diff,
                                                                   check=options.check)
    return PlaybookRunner(book, inv, options, reporter, templar_for(book.path),
                          run_state=run_state)


def run_playbook_command(book_path: Path, inv: Any, command: PlayCommand,
                         run_state: Any = None) -> Any:
    """Run the playbook with a console (or JSON) reporter; write JUnit if asked.

    run_state: a RunState the caller prepared (and reads afterwards), or None.
    Returns the RunReport; the caller decides the exit code and what else to print.
    """
    from ascendctl.junit import write_junit
    from ascendctl.playbook.reporting import junit_report

    report = _runner(book_path, inv, command, run_state).run()
    if command.junit is not None:
        write_junit(junit_report(report), command.junit)
    return report


def list_playbook_tasks(book_path: Path, inv: Any, command: PlayCommand) -> None:
    """Print the plays and tasks that would run (contacts nothing)."""
    from ascendctl.console import get_console, print_json
    from ascendctl.playbook.reporting import list_tasks
    from ascendctl.playbook.runner import task_selected

    runner = _runner(book_path, inv, command)
    planned = runner.plan(for_run=False)
    if command.as_json:
        print_json({"playbook": str(runner.playbook.path), "plays": [
            {"name": p.name, "hosts": [h.name for h in hosts], "order": p.order,
             "rescue": p.rescue, "always": p.always,
             "tasks": [{"name": t.name, "module": t.module, "tags": sorted(t.tags | p.tags)}
                       for t in p.tasks if task_selected(t, p, runner.options)],
             "handlers": [h.name for h in p.handlers]} for p, hosts in planned]})
    else:
        list_tasks(planned, runner.options, get_console())
