"""The `ascendctl` command line.

Each command group lives in its own module exposing `register(app)`. Modules import
only typer at the top; heavy libraries (fabric, rich, jinja2) are imported inside the
commands that need them, so `ascendctl --help` starts fast.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import EXIT_CODES_HELP, Exit

COMMAND_MODULES: tuple[str, ...] = (
    "inventory", "preflight", "plan", "pd", "deploy", "status", "events", "node", "bench",
    "doctor", "render", "play", "weights", "engine", "lab", "demo",
)

# `ascendctl --help` lists the commands in the order of the job, then the tools.
JOB_ORDER: tuple[str, ...] = (
    "inventory", "preflight", "plan", "deploy", "status", "rollback", "history", "events",
    "node", "bench", "doctor",
)
TOOL_ORDER: tuple[str, ...] = ("facts", "pd", "render", "play", "weights", "engine", "lab", "demo")


class JobOrderGroup(TyperGroup):
    """The root command: its commands and groups in JOB_ORDER then TOOL_ORDER (Typer
    would list the plain commands first, then the groups, each in registration order)."""

    def list_commands(self, ctx: Any) -> list[str]:   # Typer's own (vendored) click.Context
        rank = {name: index for index, name in enumerate(JOB_ORDER + TOOL_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: rank.get(name, len(rank)))


ENVIRONMENT_HELP = (
    "Environment (for CI on a jump host; secrets only ever from the environment or files): "
    "ASCENDCTL_INVENTORY (-i); ASCENDCTL_YES=1 (--yes: consent to restart engines without a "
    "terminal); ASCENDCTL_FORKS (--forks); ASCENDCTL_SSH_KEY (private key file for every "
    "host, overrides ssh.private_key); ASCENDCTL_KNOWN_HOSTS (known_hosts file, overrides "
    "ssh.known_hosts); the API key: the variable or 0600 file named by the inventory's "
    "serving.api_key; ASCENDCTL_PLAIN=1 (plain text, no colour); ASCENDCTL_BENCH_TIMEOUT "
    "(bench --timeout); ASCENDCTL_DOCTOR_SINCE (doctor --since). Without a terminal nothing "
    "prompts: commands that need consent fail with exit 2 unless --yes is given. See "
    "docs/operations.md."
)

app = typer.Typer(
    name="ascendctl",
    cls=JobOrderGroup,
    help=(
        "Bring a multi-node Ascend 910B cluster from bare metal to a healthy vLLM-Ascend "
        "endpoint, and keep it healthy. Start with `ascendctl lab up` to get a simulated "
        "cluster, then `ascendctl preflight -i INVENTORY`."
    ),
    epilog=EXIT_CODES_HELP + "\n\n" + ENVIRONMENT_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _register_commands() -> None:
    from ascendctl.cli.helptext import reflow_app

    for name in COMMAND_MODULES:
        importlib.import_module(f"ascendctl.cli.{name}").register(app)
    reflow_app(app)


def _print_version(value: bool) -> None:
    # an option callback: it runs while the options are parsed, so `ascendctl --version`
    # needs no command (the group's own callback would only run with one)
    if value:
        from ascendctl import __version__

        typer.echo(f"ascendctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                 is_eager=True, callback=_print_version),
) -> None:
    return None


def main() -> None:
    _register_commands()
    try:
        app(prog_name="ascendctl")
    except AscendctlError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(int(err.exit_code))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(int(Exit.INTERRUPTED))
