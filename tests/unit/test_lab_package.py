"""The lab is a package of its own (ascendctl_lab): the product loads it only when a lab
command runs, after the `lab` extra's dependencies were found."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB_EXTRA = ("tokenizers", "safetensors", "numpy")

LAB_MODULES_AFTER = """
import sys
from typer.testing import CliRunner
import ascendctl.cli as cli
cli._register_commands()
for args in {invocations!r}:
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, (args, result.output)
print(sorted(m for m in sys.modules if m.split(".")[0] == "ascendctl_lab"))
"""


def lab_modules_after(*invocations: list[str]) -> list[str]:
    code = LAB_MODULES_AFTER.format(invocations=list(invocations))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


def test_no_command_but_a_lab_one_imports_the_lab():
    assert lab_modules_after(["--help"], ["lab", "--help"], ["deploy", "--help"],
                             ["demo", "--help"], ["inventory", "check", "--help"]) == []


def test_the_fault_help_reads_the_kinds_from_the_lab():
    from ascendctl_lab.faults import FAULT_KINDS

    assert "ascendctl_lab.faults" in lab_modules_after(["lab", "fault", "--help"])
    from typer.testing import CliRunner

    import ascendctl.cli as cli

    if not cli.app.registered_groups:
        cli._register_commands()
    result = CliRunner().invoke(cli.app, ["lab", "fault", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert all(kind in result.output for kind in FAULT_KINDS)


@pytest.fixture(scope="module")
def site_without_lab_extra(tmp_path_factory) -> Path:
    """This venv's site-packages without the lab extra's packages (links to the others)."""
    site = Path(sysconfig.get_paths()["purelib"])
    bare = tmp_path_factory.mktemp("site")
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.endswith(".pth") or name.startswith(("__editable__", *LAB_EXTRA)):
            continue
        (bare / entry.name).symlink_to(entry)
    return bare


@pytest.mark.parametrize("args", [["lab", "up"], ["lab", "status", "--name", "absent"],
                                  ["lab", "model", "--out", "MODEL"], ["demo"]],
                         ids=" ".join)
def test_without_the_lab_extra_lab_commands_exit_2_naming_it(site_without_lab_extra, tmp_path,
                                                             args):
    args = [str(tmp_path / "model") if a == "MODEL" else a for a in args]
    code = (f"import sys; sys.path[:0] = {[str(site_without_lab_extra), str(ROOT), str(ROOT / 'runtime')]!r}\n"
            f"sys.argv = ['ascendctl', *{args!r}]\n"
            "import atexit\n"
            "atexit.register(lambda: print(sorted(m for m in sys.modules if m.startswith('ascendctl_lab'))))\n"
            "from ascendctl.cli import main\nmain()\n")
    env = {**os.environ, "ASCENDCTL_LAB_ROOT": str(tmp_path / "labroot")}
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "pip install 'ascendctl[lab]'" in line
    assert "tokenizers" in line
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert not (tmp_path / "model").exists() and not (tmp_path / "labroot").exists()
