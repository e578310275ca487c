"""`ascendctl facts` and `ascendctl preflight`: what every node is, and whether it is ready."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.cli.options import (
    INVENTORY_HELP, forks_option, inventory_option, json_option, junit_option,
    limit_option,
)

PREFLIGHT_EXIT_HELP = (
    "Exit codes: 0 every check passed; 3 warnings only; 1 a check failed; "
    "4 a node was unreachable (takes precedence); 2 bad input (nothing was contacted); "
    "130 interrupted."
)
FACTS_EXIT_HELP = ("Exit codes: 0 facts from every host; 1 a host answered but its gather "
                   "failed; 4 a host was unreachable; 2 bad input; 130 interrupted.")
PINGS_HELP = ("Device-IP ping matrix: pairs (every pair of nodes, each node pings the next "
              "N/2), ring (next node only), all-ports (every port of every other node), none.")


def _pings_option():
    return typer.Option("pairs", "--pings", help=PINGS_HELP)


def _connect_timeout_option():
    return typer.Option(None, "--connect-timeout", min=0.1,
                        help="Override the inventory's ssh.connect_timeout (seconds).")


def _check_pings(value: str) -> str:
    from ascendctl.errors import InputError
    from ascendctl.preflight.plan import PING_STRATEGIES

    if value not in PING_STRATEGIES:
        raise InputError(f"{value!r}: use one of {', '.join(PING_STRATEGIES)}", field="--pings")
    return value


def preflight(
    inventory: Optional[Path] = typer.Option(None, "-i", "--inventory", envvar="ASCENDCTL_INVENTORY",
                                             help=INVENTORY_HELP + " Required unless --list.",
                                             show_envvar=True),
    only: Optional[List[str]] = typer.Option(
        None, "--only", help="Run only these checks: ids or categories, comma-separated or "
        "repeated (e.g. --only roce,versions.pinned)."),
    skip: Optional[List[str]] = typer.Option(
        None, "--skip", help="Skip these checks (ids or categories)."),
    as_json: bool = json_option(),
    junit: Optional[Path] = junit_option("one testcase per check and node"),
    limit: Optional[str] = limit_option(),
    forks: int = forks_option(),
    pings: str = _pings_option(),
    clock_tolerance: float = typer.Option(
        1.0, "--clock-tolerance", min=0.001, help="Largest clock offset from this machine "
        "(seconds) that host.clock accepts."),
    disk_headroom: float = typer.Option(
        1.0, "--disk-headroom", min=0.0, help="GiB the deploy root needs beyond the model "
        "(releases, logs, helper) for host.disk."),
    strict_own_units: bool = typer.Option(
        False, "--strict-own-units", help="Also fail on NPUs/ports held by our own running "
        "ascendctl-*.service units (by default allowed: a re-deploy restarts them)."),
    connect_timeout: Optional[float] = _connect_timeout_option(),
    list_checks: bool = typer.Option(False, "--list", help="List the checks and exit "
                                     "(contacts nothing)."),
) -> None:
    """Check every node before a deploy: versions, NPUs, RoCE ports, PCIe/BIOS, host, network.

    Facts are gathered in one SSH round trip per host (the preflight playbook's first
    task), then all checks run once on this machine against the inventory. Prints a
    table per node grouped by category (plain text when piped); every failure shows the
    node, the check id, the message and the command that fixes it. See docs/preflight.md
    for the JSON schema and what the inventory sets.
    """
    import sys

    from ascendctl.console import print_json
    from ascendctl.exitcodes import Exit
    from ascendctl.load import load_inventory
    from ascendctl.preflight.expectations import PreflightOptions
    from ascendctl.preflight.model_size import model_source_bytes
    from ascendctl.preflight.report import validate_selection
    from ascendctl.preflight.run import PreflightRequest, run_preflight

    if list_checks:
        _list_checks(as_json)
        return
    if inventory is None:
        from ascendctl.errors import InputError

        raise InputError("missing option: give the inventory with -i/--inventory", field="--inventory")
    only_ids = validate_selection(only or [], "--only")
    skip_ids = validate_selection(skip or [], "--skip")
    inv = load_inventory(inventory)
    if limit:
        inv.select(limit)   # a pattern that matches nothing is bad input, before any SSH
    request = PreflightRequest(
        limit=limit, forks=forks, only=only_ids, skip=skip_ids, pings=_check_pings(pings),
        options=PreflightOptions(clock_tolerance_s=clock_tolerance,
                                 disk_headroom_gib=disk_headroom,
                                 allow_own_units=not strict_own_units),
        connect_timeout=connect_timeout, model_bytes=model_source_bytes(inv))
    _progress(f"preflight: gathering facts from {len(inv.select(limit))} host(s)…", as_json)
    report, run = run_preflight(inv, request)
    if junit is not None:
        from ascendctl.junit import write_junit
        from ascendctl.preflight.junit import junit_report

        write_junit(junit_report(report), junit)
    if as_json:
        print_json(report)
    else:
        from ascendctl.preflight.output import print_report

        print_report(report)
    if run.interrupted:
        raise typer.Exit(int(Exit.INTERRUPTED))
    sys.stdout.flush()
    raise typer.Exit(report["exit_code"])


def _progress(text: str, as_json: bool) -> None:
    import sys

    from ascendctl.console import is_terminal

    if not as_json and is_terminal(sys.stderr):
        print(text, file=sys.stderr)


def _list_checks(as_json: bool) -> None:
    from ascendctl.checks import SPECS
    from ascendctl.console import get_console, print_json

    rows = [{"id": s.id, "category": s.category, "severity": s.severity.value, "scope": s.scope,
             "title": s.title, "remediation": s.remediation} for s in SPECS.values()]
    if as_json:
        print_json({"checks": rows})
        return
    console = get_console()
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        console.print(f"{r['id']:<{width}}  {r['severity']:<4}  {r['scope']:<7}  {r['title']}",
                      highlight=False, markup=False)


def facts(
    inventory: Path = inventory_option(),
    limit: Optional[str] = limit_option(),
    forks: int = forks_option(),
    pings: str = _pings_option(),
    connect_timeout: Optional[float] = _connect_timeout_option(),
    as_json: bool = json_option(),
) -> None:
    """Gather the facts of every host in ONE SSH round trip per host (read-only).

    One remote execution of the gather script per host: npu-smi (info, topo, health),
    hccn_tool per RoCE port, driver/firmware/CANN version files, /etc/hccn.conf, ip,
    lspci, NUMA, free disk, listening ports, clock, Python packages, and the device-IP
    pings towards the other hosts. Only when the inventory omits a host's device_ips is
    there a second, ping-only round trip towards it (its addresses come from the first
    round's /etc/hccn.conf).
    """
    from ascendctl.console import print_json
    from ascendctl.exitcodes import Exit
    from ascendctl.load import load_inventory
    from ascendctl.preflight.run import PreflightRequest, run_facts

    inv = load_inventory(inventory)
    if limit:
        inv.select(limit)
    _progress(f"facts: gathering from {len(inv.select(limit))} host(s)…", as_json)
    result = run_facts(inv, PreflightRequest(limit=limit, forks=forks, pings=_check_pings(pings),
                                             connect_timeout=connect_timeout))
    if as_json:
        print_json({
            "inventory": str(inv.path),
            "hosts": {n: {"gather_s": result.durations.get(n), **f.to_dict()}
                      for n, f in result.facts.items()},
            "failed": {n: {"error": why, "error_kind": kind} for n, (why, kind) in result.failed.items()},
            "remote_executions": result.exec_counts,
        })
    else:
        from ascendctl.preflight.facts_table import print_facts

        print_facts(inv, result)
    if result.run.interrupted:
        raise typer.Exit(int(Exit.INTERRUPTED))
    if any(kind != "failed" for _, kind in result.failed.values()):
        raise typer.Exit(int(Exit.UNREACHABLE))
    raise typer.Exit(int(Exit.FAILED) if result.failed else 0)


def register(root: typer.Typer) -> None:
    root.command("preflight", epilog=PREFLIGHT_EXIT_HELP)(preflight)
    root.command("facts", epilog=FACTS_EXIT_HELP)(facts)
