"""The CLI starts fast: registering every command imports no heavy library."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("fabric", "paramiko", "rich", "jinja2", "pydantic", "yaml", "invoke", "cryptography")


def test_registering_commands_imports_no_heavy_module():
    code = ("import sys\nimport ascendctl.cli as cli\ncli._register_commands()\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_command_has_help():
    from typer.testing import CliRunner

    import ascendctl.cli as cli

    cli._register_commands()
    runner = CliRunner()
    top = runner.invoke(cli.app, ["--help"])
    assert top.exit_code == 0 and "Exit codes" in top.output
    for command in cli.app.registered_commands:
        result = runner.invoke(cli.app, [command.name or command.callback.__name__, "--help"])
        assert result.exit_code == 0, (command.name, result.output)
    for group in cli.app.registered_groups:
        result = runner.invoke(cli.app, [group.name, "--help"])
        assert result.exit_code == 0, (group.name, result.output)
