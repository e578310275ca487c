"""`ascendctl doctor`: what broke, on which node, why, and what to do.
`ascendctl doctor explain FILE`: the same for a saved log, offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import INVENTORY_HELP, forks_option, json_option

DOCTOR_EXIT_HELP = (
    "Exit codes: 0 no known error signature found; 3 warnings only; 1 error signatures "
    "found; 4 a node could not be collected from (takes precedence; the others still "
    "are); 2 bad input (nothing contacted); 130 interrupted."
)
EXPLAIN_EXIT_HELP = (
    "Exit codes: 0 no known error signature in the log (info-only signatures do not "
    "count); 3 warning signatures only; 1 error signatures found; 2 bad input (no such "
    "file, not a regular file, larger than 16 GiB); 130 interrupted. No host is contacted."
)

app = typer.Typer(help="Collect logs from every node and explain known errors; or explain "
                       "a saved log offline (`doctor explain FILE`).",
                  epilog=DOCTOR_EXIT_HELP)


@app.callback(invoke_without_command=True)
def doctor(
    ctx: typer.Context,
    inventory: Optional[Path] = typer.Option(
        None, "-i", "--inventory", envvar="ASCENDCTL_INVENTORY", show_envvar=True,
        help=INVENTORY_HELP + " Required unless a subcommand is given."),
    since: str = typer.Option("1h", "--since", envvar="ASCENDCTL_DOCTOR_SINCE",
                              help="How far back to read logs: 30m, 1h, 2d, ..."),
    bundle: Optional[Path] = typer.Option(
        None, "--bundle", "-b", help="Also write everything collected, a manifest and the "
        "findings to this tar.gz (secrets never included)."),
    forks: int = forks_option(),
    as_json: bool = json_option(),
) -> None:
    """Collect logs from every node, explain known errors, write a support bundle.

    Collects from every node - the ascendctl units' journals (engine logs), HCCL/CANN
    plog and slog tails (~/ascend/log, /var/log/npu, $ASCEND_PROCESS_LOG_PATH), kernel
    messages, `npu-smi info`, the RoCE ports' link / net_health / TLS, listening ports
    and the release state - in one remote run per node, then match every line against
    the table of known error signatures (ascendctl/doctor/data/signatures.yaml; see
    docs/operations.md). Each match is printed once per node with its count, the log
    line, the cause and the fix; the earliest error is marked as the probable root cause.

    `ascendctl doctor explain FILE` does the matching on a saved log instead, offline.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ascendctl.console import get_console, print_json
    from ascendctl.doctor import parse_since, run_doctor
    from ascendctl.errors import InputError
    from ascendctl.load import load_inventory
    from ascendctl.transport import SshPool

    if inventory is None:
        raise InputError("give the inventory (-i INVENTORY or ASCENDCTL_INVENTORY), or "
                         "`doctor explain FILE` for a saved log", field="--inventory")
    since_s = parse_since(since)
    inv = load_inventory(inventory)
    if bundle is not None and bundle.exists() and bundle.is_dir():
        raise InputError(f"{bundle} is a directory; give a file name (e.g. doctor.tar.gz)",
                         field="--bundle")
    with SshPool(inv.hosts, forks=forks) as pool:
        report = run_doctor(inv, pool, since_s=since_s, bundle=bundle)
    if as_json:
        print_json(report.as_dict())
    else:
        from ascendctl.doctor.report import print_report

        print_report(report, get_console())
    raise typer.Exit(int(report.exit_code))


@app.command("explain", epilog=EXPLAIN_EXIT_HELP)
def explain(
    file: str = typer.Argument(..., metavar="FILE",
                               help="The saved log: a regular file, or - for standard input."),
    as_json: bool = json_option(),
) -> None:
    """Explain a saved log offline: known error signatures, line by line.

    For the log someone pastes into a ticket (an engine journal, a plog, `npu-smi` or
    `hccn_tool` output, or all of them in one file): no inventory is read and no host is
    contacted. Every line is matched against the signature table; each signature found is
    printed once with its line numbers, the first matching line, the fields it extracts
    (durations also in seconds), the cause and the fix, errors first in the order they
    appear; the earliest error that is not a consequence is the probable root cause.
    Secrets in the log (API keys, tokens, passwords, Authorization headers, ...) are
    redacted in the output. The file is streamed: any size up to 16 GiB, lines longer
    than 1 MiB are matched on their first 1 MiB.
    """
    from ascendctl.console import get_console, print_json
    from ascendctl.doctor.explain import explain_log
    from ascendctl.doctor.logfile import STDIN, LogReader, open_log
    from ascendctl.doctor.signatures import default_signatures

    name = "<stdin>" if file == STDIN else file
    with open_log(file, stdin=sys.stdin.buffer if file == STDIN else None) as stream:
        result = explain_log(LogReader(stream, name=name), default_signatures())
    if as_json:
        print_json(result.as_dict())
    else:
        from ascendctl.doctor.report import print_explanation

        print_explanation(result, get_console())
    raise typer.Exit(int(result.exit_code))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="doctor")
