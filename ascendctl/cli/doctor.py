"""`ascendctl doctor`: what broke, on which node, why, and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import forks_option, inventory_option, json_option

DOCTOR_EXIT_HELP = (
    "Exit codes: 0 no known error signature found; 3 warnings only; 1 error signatures "
    "found; 4 a node could not be collected from (takes precedence; the others still "
    "are); 2 bad input (nothing contacted); 130 interrupted."
)


def doctor(
    inventory: Path = inventory_option(),
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
    """
    from ascendctl.console import get_console, print_json
    from ascendctl.doctor import parse_since, run_doctor
    from ascendctl.inventory import load_inventory
    from ascendctl.transport import SshPool

    since_s = parse_since(since)
    inv = load_inventory(inventory)
    if bundle is not None and bundle.exists() and bundle.is_dir():
        from ascendctl.errors import InputError

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


def register(root: typer.Typer) -> None:
    root.command("doctor", epilog=DOCTOR_EXIT_HELP)(doctor)
