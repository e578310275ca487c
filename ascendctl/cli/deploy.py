"""`ascendctl deploy`, `ascendctl rollback`, `ascendctl history`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

DEPLOY_EXIT_HELP = (
    "Exit codes: 0 deployed (or nothing to change); 1 a gate or step failed before the "
    "engines were touched; 2 bad input; 4 a node unreachable; 5 another deploy holds the "
    "lock; 6 the new release failed and every node was rolled back to the previous one; "
    "130 interrupted."
)


def run_deploy_playbook(book: str, inventory: Path, *, check: bool = False,
                        diff: bool = False, yes: bool = False, forks: int = 16,
                        force_unlock: bool = False, skip_tags: Optional[List[str]] = None,
                        as_json: bool = False, junit: Optional[Path] = None,
                        extra_vars: Optional[dict] = None, verb: str = "deploy") -> int:
    """Run deploy.yaml or rollback.yaml; print the verdict; return the exit code."""
    import sys

    from ascendctl.cli.playrun import PlayCommand, run_playbook_command, split_tags
    from ascendctl.console import get_console, print_json
    from ascendctl.deploy.context import DeployContext, DeployOptions
    from ascendctl.inventory import load_inventory
    from ascendctl.paths import playbooks_dir

    inv = load_inventory(inventory)
    console = get_console(stderr=True)
    options = DeployOptions(force_unlock=force_unlock,
                            show_progress=not as_json and sys.stderr.isatty(),
                            on_event=None if as_json else
                            (lambda msg: console.print(f"  [dim]·[/dim] {msg}")))
    context = DeployContext.open(inv, options)
    try:
        report = run_playbook_command(
            playbooks_dir() / book, inv,
            PlayCommand(check=check, diff=diff or check, forks=forks, yes=yes,
                        skip_tags=split_tags(skip_tags), as_json=as_json, junit=junit,
                        extra_vars=extra_vars or {}))
    finally:
        context.close()
    code, summary = _verdict(context, report, verb=verb, check=check)
    if as_json:
        print_json({**report.as_dict(), "outcome": _outcome_dict(context), "summary": summary})
    else:
        style = "green" if code == 0 else "red"
        console.print(f"[{style}]{summary}[/{style}]")
    return int(code)


def _outcome_dict(context) -> dict:
    from dataclasses import asdict

    return asdict(context.outcome)


def _verdict(context, report, *, verb: str, check: bool):
    from ascendctl.exitcodes import Exit

    outcome = context.outcome
    if outcome.lock_holder is not None:
        holder = outcome.lock_holder
        return Exit.LOCKED, (f"{verb} refused: the cluster is locked by {holder.get('holder')} "
                             f"since {holder.get('since')}")
    if outcome.failed_step:
        where = f"{verb} failed at step '{outcome.failed_step}' on {outcome.failed_node}: " \
                f"{outcome.reason}"
        if outcome.rolled_back_to:
            return Exit.ROLLED_BACK, (f"{where}. Every node is back on "
                                      f"{outcome.rolled_back_to} and serving; "
                                      f"{outcome.release_id} is marked failed.")
        return Exit.FAILED, where + (f". Rollback failed: {outcome.rollback_failed}"
                                     if outcome.rollback_failed else "")
    code = report.exit_code()
    if code != 0:
        failed = _first_failure(report)
        detail = f": {failed}" if failed else ""
        return code, f"{verb} stopped before touching the engines{detail}"
    if check:
        return Exit.OK, f"{verb} --check: nothing was changed"
    if outcome.changed:
        return Exit.OK, (f"{outcome.release_id} is serving (previous: "
                         f"{outcome.previous or 'none'}); first completion: "
                         f"{outcome.completion!r}")
    return Exit.OK, f"{outcome.release_id or 'the release'} was already serving: nothing changed"


def _first_failure(report) -> str | None:
    for play in report.plays:
        for task in play.tasks:
            for host, result in task.results.items():
                if result.counts_as_failure or result.status == "unreachable":
                    return f"{task.name} on {host}: {result.msg}"
    return report.aborted or None


def deploy(
    inventory: Path = inventory_option(),
    check: bool = typer.Option(False, "--check", "-C",
                               help="Show the plan and the diffs; touch nothing."),
    diff: bool = typer.Option(False, "--diff", "-D", help="Show diffs of changed files."),
    yes: bool = typer.Option(False, "--yes", "-y", envvar="ASCENDCTL_YES",
                             help="Do not ask before stopping the serving engines "
                             "(required without a terminal)."),
    force_unlock: bool = typer.Option(False, "--force-unlock",
                                      help="Break a lock left by a deploy that died "
                                      "(check `ascendctl history` first)."),
    skip_tags: Optional[List[str]] = typer.Option(
        None, "--skip-tags", help="Skip steps by tag, e.g. preflight (not recommended)."),
    forks: int = typer.Option(16, "--forks", "-f", min=1, envvar="ASCENDCTL_FORKS",
                              help="Nodes worked on in parallel."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    as_json: bool = json_option(),
) -> None:
    """Deploy the inventory: preflight gate, lock, stage the release on every node, push
    the weights, start the ranks in order (head first), prove readiness with real
    requests, then switch `current`.

    If anything fails after the old engines stopped, every node goes back to the previous
    release and serves again; the new release is marked failed. Deploying the same
    inventory twice changes and restarts nothing. The steps are playbooks/deploy.yaml.
    """
    raise typer.Exit(run_deploy_playbook(
        "deploy.yaml", inventory, check=check, diff=diff, yes=yes, forks=forks,
        force_unlock=force_unlock, skip_tags=skip_tags, as_json=as_json, junit=junit))


def rollback(
    inventory: Path = inventory_option(),
    to: Optional[str] = typer.Option(None, "--to", help="Release id to go back to "
                                     "(default: the previous good one; see `history`)."),
    check: bool = typer.Option(False, "--check", "-C", help="Show what would happen."),
    yes: bool = typer.Option(False, "--yes", "-y", envvar="ASCENDCTL_YES",
                             help="Do not ask before stopping the serving engines."),
    force_unlock: bool = typer.Option(False, "--force-unlock", help="Break a stale lock."),
    forks: int = typer.Option(16, "--forks", "-f", min=1, envvar="ASCENDCTL_FORKS"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    as_json: bool = json_option(),
) -> None:
    """Switch every node back to an earlier release (no weights copied), restarting in
    rank order and gating on readiness. The steps are playbooks/rollback.yaml."""
    raise typer.Exit(run_deploy_playbook(
        "rollback.yaml", inventory, check=check, yes=yes, forks=forks,
        force_unlock=force_unlock, as_json=as_json, junit=junit,
        extra_vars={"rollback_to": to or "previous"}, verb="rollback"))


def history(
    inventory: Path = inventory_option(),
    as_json: bool = json_option(),
) -> None:
    """Release history, like `kubectl rollout history`: every release on the nodes, which
    one is current, which failed and why."""
    from ascendctl.console import get_console, print_json
    from ascendctl.deploy.history import collect_history, history_table
    from ascendctl.inventory import load_inventory

    inv = load_inventory(inventory)
    data = collect_history(inv)
    if as_json:
        print_json(data)
    else:
        get_console().print(history_table(data))
    if data["unreachable"]:
        from ascendctl.exitcodes import Exit

        raise typer.Exit(int(Exit.UNREACHABLE))


def register(root: typer.Typer) -> None:
    root.command("deploy", epilog=DEPLOY_EXIT_HELP)(deploy)
    root.command("rollback", epilog=DEPLOY_EXIT_HELP)(rollback)
    root.command("history", epilog=EXIT_CODES_HELP)(history)
