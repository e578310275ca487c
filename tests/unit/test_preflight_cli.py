"""`ascendctl preflight` / `ascendctl facts` before any host is contacted: bad input is
exit 2 with one line naming the problem; --list; --help documents the exit codes; the
playbook and its modules load."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from ascendctl.checks import SPECS
from ascendctl.cli import _register_commands, app
from ascendctl.exitcodes import Exit

from test_preflight_support import write_inventory

_register_commands()
runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        from ascendctl.errors import AscendctlError

        if isinstance(result.exception, AscendctlError):
            return int(result.exception.exit_code), str(result.exception)
        raise result.exception
    return result.exit_code, result.output


def test_help_documents_exit_codes():
    code, out = invoke("preflight", "--help")
    flat = " ".join(out.split())
    assert code == 0
    for text in ("0 every check passed", "3 warnings only", "1 a check failed", "4 a node was unreachable"):
        assert text in flat
    code, out = invoke("facts", "--help")
    assert code == 0 and "ONE SSH round trip per host" in " ".join(out.split())


def test_list_checks_json():
    code, out = invoke("preflight", "--list", "--json")
    assert code == 0
    rows = json.loads(out)["checks"]
    assert [r["id"] for r in rows] == list(SPECS)
    assert all(r["remediation"] and r["severity"] in ("fail", "warn") for r in rows)


@pytest.mark.parametrize("args,pattern", [
    (("--only", "rocee"), r"--only: 'rocee' is neither a check id nor a category"),
    (("--skip", "roce,nope.x"), r"--skip: 'nope.x'"),
    (("--pings", "mesh"), r"--pings: 'mesh': use one of pairs, ring, all-ports, none"),
    (("--limit", "node9"), r"'node9' matches no host or group"),
])
def test_bad_options_are_exit_2_before_any_ssh(tmp_path, args, pattern):
    inv = write_inventory(tmp_path)
    code, out = invoke("preflight", "-i", str(inv), *args)
    assert code == Exit.USAGE and re.search(pattern, out), out


def test_bad_inventory_is_exit_2(tmp_path):
    path = write_inventory(tmp_path)
    path.write_text(path.read_text().replace("chip: 910B3", "chip: 910Z"))
    for command in ("preflight", "facts"):
        code, out = invoke(command, "-i", str(path))
        assert code == Exit.USAGE and re.search(r"inventory.yaml:\d+: all.vars.cluster.chip: '910Z'", out), out
    code, out = invoke("preflight")
    assert code == Exit.USAGE and "-i/--inventory" in out


def test_missing_model_source_is_exit_2(tmp_path):
    inv = write_inventory(tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "model")
    code, out = invoke("preflight", "-i", str(inv))
    assert code == Exit.USAGE and "model.source" in out


def test_playbook_loads_with_the_preflight_modules():
    from ascendctl.playbook import load_playbook
    from ascendctl.playbook.modules import MODULES
    from ascendctl.preflight.run import playbook_path

    book = load_playbook(playbook_path())
    (play,) = book.plays
    assert [t.module for t in play.tasks] == ["preflight_gather", "preflight_pings", "preflight_checks"]
    checks = play.tasks[-1]
    assert checks.run_once and MODULES["preflight_checks"].runs_on == "controller"
    assert {t.module for t in play.tasks if "facts" in t.tags} == {"preflight_gather", "preflight_pings"}
    args = MODULES["preflight_checks"].Args.model_validate({"only": "roce, versions.pinned", "skip": None})
    assert args.only == ["roce", "versions.pinned"] and args.skip == []
