"""`ascendctl deploy`, `ascendctl rollback`, `ascendctl history`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.cli.options import (
    check_option, diff_option, forks_option, inventory_option, json_option, junit_option,
    yes_option,
)
from ascendctl.exitcodes import EXIT_CODES_HELP

DEPLOY_EXIT_HELP = (
    "Exit codes: 0 deployed (or nothing to change); 1 a step failed (before the engines "
    "were touched, or the previous release could not be restored: the message names each "
    "node's release); 2 bad input; 4 a node unreachable; 5 another deploy holds the lock, "
    "or this one lost it (then it stops at the next step, before touching the engines); "
    "6 the new release failed and every node was rolled back to the previous one; "
    "130 interrupted."
)
FORCE_UNLOCK_HELP = ("Break a lock left by a deploy that died: only a stale lock (no "
                     "heartbeat for 15 min). Check `ascendctl history` first.")
REALLY_HELP = ("With --force-unlock: also break a lock whose heartbeat is fresh (its deploy "
               "still runs; it stops at its next step). Your second, explicit consent.")
PLAYBOOK_HELP = ("Run this playbook instead of the packaged one (a copy you extended: "
                 "see docs/deploy.md).")


def _maintenance_limit(inv) -> tuple[dict[str, str], Optional[str]]:
    """The serving groups with a node in maintenance (`ascendctl node drain`, or the fault
    policy), and the host pattern that leaves them out. Refuses when no group is left."""
    from ascendctl.errors import InputError
    from ascendctl.maintenance import groups_in_maintenance, show_all

    skipped = groups_in_maintenance(inv, show_all(inv))
    if not skipped:
        return {}, None
    if len(skipped) == len(inv.serving_groups):
        raise InputError("every serving group has a node in maintenance: "
                         + "; ".join(skipped.values())
                         + " (`ascendctl node undrain NODE` first)", field="NODE")
    hosts = [h for g in inv.serving_groups if g.name in skipped for h in g.hosts]
    return skipped, "all:" + ":".join(f"!{h}" for h in hosts)


def run_deploy_playbook(book: str | Path, inventory: Path, *, check: bool = False,
                        diff: bool = False, yes: bool = False, forks: int = 16,
                        force_unlock: bool = False, really: bool = False,
                        skip_tags: Optional[List[str]] = None, as_json: bool = False,
                        junit: Optional[Path] = None, extra_vars: Optional[dict] = None,
                        verb: str = "deploy") -> int:
    """Run deploy.yaml or rollback.yaml (or an operator's copy); print the verdict; return
    the exit code."""
    import sys

    from ascendctl.cli.playrun import PlayCommand, run_playbook_command, split_tags
    from ascendctl.console import get_console, print_json
    from ascendctl.deploy.nodeops import ForceUnlock
    from ascendctl.deploy.run import DeployOptions, DeployRun
    from ascendctl.deploy.verdict import deploy_verdict
    from ascendctl.releases.scope import scope_warnings
    from ascendctl.errors import InputError
    from ascendctl.load import load_inventory
    from ascendctl.paths import playbooks_dir
    from ascendctl.playbook import RunOptions
    from ascendctl.playbook.state import RunState

    if really and not force_unlock:
        raise InputError("--really only goes with --force-unlock", field="--really")
    inv = load_inventory(inventory)
    console = get_console(stderr=True)
    if verb == "deploy":
        for warning in scope_warnings(inv):
            console.print(f"warning: {warning}", markup=False)
    if check:
        from ascendctl.drift import option_warnings

        for warning in option_warnings(inv):
            console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    skipped, limit = _maintenance_limit(inv)
    for group, why in skipped.items():
        console.print(f"warning: {verb} skips serving group {group}: {why} "
                      "(`ascendctl node undrain` returns it)", markup=False, soft_wrap=True)
    force = ForceUnlock.ANY if really else ForceUnlock.STALE if force_unlock else ForceUnlock.NO
    options = DeployOptions(force_unlock=force,
                            show_progress=not as_json and sys.stderr.isatty(),
                            on_event=None if as_json else
                            (lambda msg: console.print(f"  [dim]·[/dim] {msg}")))
    run_state = RunState()
    run = run_state.add(DeployRun(inv, options))
    run.in_maintenance = frozenset(skipped)
    path = book if isinstance(book, Path) else playbooks_dir() / book
    report = run_playbook_command(
        path, inv, PlayCommand(RunOptions(check=check, diff=diff or check, forks=forks, yes=yes,
                                          skip_tags=split_tags(skip_tags),
                                          extra_vars=extra_vars or {}, limit=limit),
                               as_json=as_json, junit=junit),
        run_state=run_state)
    code, summary = deploy_verdict(run.outcome, report, run_state.failure, verb=verb,
                                   check=check)
    if as_json:
        print_json({**report.as_dict(), "outcome": run.outcome.as_dict(),
                    "skipped_groups": skipped,
                    "done": run.done.as_list(), "summary": summary, "exit_code": int(code)})
    else:
        style = "green" if code == 0 else "red"
        console.print(f"[{style}]{summary}[/{style}]")
    return int(code)


def deploy(
    inventory: Path = inventory_option(),
    check: bool = check_option(),
    diff: bool = diff_option(),
    yes: bool = yes_option(),
    force_unlock: bool = typer.Option(False, "--force-unlock", help=FORCE_UNLOCK_HELP),
    really: bool = typer.Option(False, "--really", help=REALLY_HELP),
    skip_tags: Optional[List[str]] = typer.Option(
        None, "--skip-tags", help="Skip steps by tag, e.g. preflight (not recommended)."),
    playbook: Optional[Path] = typer.Option(None, "--playbook", help=PLAYBOOK_HELP),
    forks: int = forks_option(),
    junit: Optional[Path] = junit_option(),
    as_json: bool = json_option(),
) -> None:
    """Deploy the inventory: lock, preflight gate, stage the release on every node, push
    the weights, stop the old engines, install the units, start the ranks in order (head first), prove readiness with real requests, warm up, then switch `current`.

    If anything fails after the old engines stopped, the rescue play puts every node back on the previous release and the new release is marked failed. Deploying the same inventory twice changes and restarts nothing. The steps are playbooks/deploy.yaml; run an extended copy with --playbook.

    Serving groups with a node in maintenance (`ascendctl node drain`, or the fault policy) are skipped and stay out of the gateway; the warning names them and why.
    """
    raise typer.Exit(run_deploy_playbook(
        playbook or "deploy.yaml", inventory, check=check, diff=diff, yes=yes, forks=forks,
        force_unlock=force_unlock, really=really, skip_tags=skip_tags, as_json=as_json,
        junit=junit))


def rollback(
    inventory: Path = inventory_option(),
    to: Optional[str] = typer.Option(None, "--to", help="Release id to go back to "
                                     "(default: the previous good one; see `history`)."),
    check: bool = check_option(),
    yes: bool = yes_option(),
    force_unlock: bool = typer.Option(False, "--force-unlock", help=FORCE_UNLOCK_HELP),
    really: bool = typer.Option(False, "--really", help=REALLY_HELP),
    playbook: Optional[Path] = typer.Option(None, "--playbook", help=PLAYBOOK_HELP),
    forks: int = forks_option(),
    junit: Optional[Path] = junit_option(),
    as_json: bool = json_option(),
) -> None:
    """Switch every node back to an earlier release (no weights copied), restarting in
    rank order and gating on readiness. The steps are playbooks/rollback.yaml."""
    raise typer.Exit(run_deploy_playbook(
        playbook or "rollback.yaml", inventory, check=check, yes=yes, forks=forks,
        force_unlock=force_unlock, really=really, as_json=as_json, junit=junit,
        extra_vars={"rollback_to": to or "previous"}, verb="rollback"))


def history(
    inventory: Path = inventory_option(),
    as_json: bool = json_option(),
) -> None:
    """Release history, like `kubectl rollout history`: every release on the nodes, which
    one is current, which failed and why, and each release's latest bench, quality gate
    and promotion evidence (per gate, with where its record and pictures are kept)."""
    from ascendctl.console import get_console, print_json
    from ascendctl.deploy.history import collect_history, history_table, promotion_table
    from ascendctl.load import load_inventory

    inv = load_inventory(inventory)
    data = collect_history(inv)
    if as_json:
        print_json(data)
    else:
        get_console().print(history_table(data))
        evidence = promotion_table(data)
        if evidence is not None:
            get_console().print(evidence)
    if data["unreachable"]:
        from ascendctl.exitcodes import Exit

        raise typer.Exit(int(Exit.UNREACHABLE))


def register(root: typer.Typer) -> None:
    root.command("deploy", epilog=DEPLOY_EXIT_HELP)(deploy)
    root.command("rollback", epilog=DEPLOY_EXIT_HELP)(rollback)
    root.command("history", epilog=EXIT_CODES_HELP)(history)
