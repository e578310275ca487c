"""`--help` wraps cleanly at 80 columns: no line of a help paragraph ends before the
terminal's width would have forced it (a hard line break from a docstring)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

WIDTH = 80
LIST_ITEM = re.compile(r"^\s*([-*•]|\d+[.)]|\$ )")


def _commands():
    import ascendctl.cli as cli

    if not cli.app.registered_commands:
        cli._register_commands()
    paths = [[c.name or c.callback.__name__] for c in cli.app.registered_commands]
    for group in cli.app.registered_groups:
        paths.append([group.name])
        paths += [[group.name, c.name or c.callback.__name__]
                  for c in group.typer_instance.registered_commands]
    return cli.app, paths


def premature_breaks(text: str) -> list[str]:
    """Lines of the description that stop although the next line's first word fits."""
    description = []
    for line in text.splitlines()[3:]:          # past the usage line
        if line.lstrip().startswith(("╭", "Usage:")):
            break
        description.append(line.rstrip())
    found = []
    for line, following in zip(description, description[1:]):
        if not line.strip() or not following.strip() or LIST_ITEM.match(following) \
                or len(following) - len(following.lstrip()) > len(line) - len(line.lstrip()):
            continue
        first_word = following.split()[0]
        if len(line) + 1 + len(first_word) <= WIDTH - 1:
            found.append(f"{line!r} / {following!r}")
    return found


def test_reflow_joins_paragraph_lines_and_keeps_lists():
    from ascendctl.cli.helptext import reflow

    text = "First line\ngoes on.\n\nSecond paragraph\nis here:\n\n- one\n- two\n  more\n"
    assert reflow(text) == ("First line goes on.\n\nSecond paragraph is here:\n\n"
                            "- one\n- two\n  more")


@pytest.mark.parametrize("path", _commands()[1], ids=" ".join)
def test_help_has_no_premature_line_breaks(path):
    from typer.testing import CliRunner

    app, _ = _commands()
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)},
                                terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    assert premature_breaks(result.output) == []


def test_the_commands_are_listed_in_the_order_of_the_job_then_the_tools():
    from typer.testing import CliRunner

    import ascendctl.cli as cli

    app, paths = _commands()
    result = CliRunner().invoke(app, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    listed = re.findall(r"^│ ([a-z][a-z-]*) ", result.output, flags=re.MULTILINE)
    assert listed == list(cli.JOB_ORDER + cli.TOOL_ORDER)
    assert listed[:6] == ["inventory", "preflight", "plan", "deploy", "status", "rollback"]
    assert listed[-6:] == ["render", "play", "weights", "engine", "lab", "demo"]
    registered = {path[0] for path in paths}
    assert registered == set(listed), "a new command needs its place in JOB_ORDER or TOOL_ORDER"


def test_version_needs_no_command():
    from ascendctl import __version__

    for argv in (["--version"], ["--version", "inventory", "--help"]):
        result = subprocess.run([sys.executable, "-m", "ascendctl", *argv], capture_output=True,
                                text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"ascendctl {__version__}\n"
