"""file/directory/symlink/copy/command/shell modules, their scripts executed by a real
local shell through the same command lines the SSH transport sends."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ascendctl.inventory.hosts import Host
from ascendctl.inventory.model import SshSpec
from ascendctl.playbook.loader import validate_args
from ascendctl.playbook.modules import ModuleContext, load_modules
from ascendctl.playbook.templating import Templar
from ascendctl.transport import quoting
from ascendctl.transport.results import CommandResult


class LocalConn:
    name = "local"

    def __init__(self):
        self.commands: list[str] = []

    def exec(self, command, *, stdin=None, timeout=None):
        self.commands.append(command)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        started = time.monotonic()
        proc = subprocess.run(["sh", "-c", command], input=data, capture_output=True,
                              timeout=30)
        return CommandResult("local", command, proc.returncode, proc.stdout, proc.stderr,
                             time.monotonic() - started)

    def open(self):
        pass

    def become_command(self, command, become):
        return command

    def run(self, argv, *, stdin=None, timeout=None, become=None, env=None):
        return self.exec(quoting.join_argv(quoting.with_env(env, argv)), stdin=stdin)

    def run_shell(self, script, args=(), *, stdin=None, timeout=None, become=None,
                  shell="sh"):
        return self.exec(quoting.sh_c(script, args, shell=shell), stdin=stdin)


def run_module(name, args, *, check=False, diff=True, tmp_path=None):
    modules = load_modules()
    cls = modules[name]
    conn = LocalConn()
    parsed = validate_args(cls, cls.normalize(args), lambda m, loc: ValueError(m),
                           lenient=False)
    host = Host(name="local", address="127.0.0.1", rank=0, ip="127.0.0.1", nic=None,
                device_ips=None, ssh=SshSpec(), groups=("all",))
    ctx = ModuleContext(host=host, vars={}, inventory=None, templar=Templar([]),
                        check=check, diff=diff, playbook_dir=tmp_path or Path("."),
                        hostvars={}, play_hosts=[], _conn_factory=lambda _n: conn)
    return cls().run(ctx, parsed), conn


def test_symlink_switches_atomically_and_is_idempotent(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r2").mkdir()
    link = tmp_path / "current"
    res, conn = run_module("symlink", {"path": str(link), "src": str(tmp_path / "r1")})
    assert res.changed and os.readlink(link) == str(tmp_path / "r1")
    res, _ = run_module("symlink", {"path": str(link), "src": str(tmp_path / "r1")})
    assert not res.changed
    res, _ = run_module("symlink", {"path": str(link), "src": str(tmp_path / "r2")},
                        check=True)
    assert res.changed and os.readlink(link) == str(tmp_path / "r1")   # check: untouched
    res, _ = run_module("symlink", {"path": str(link), "src": str(tmp_path / "r2")})
    assert res.changed and res.data["before"] == str(tmp_path / "r1")
    # mv -T replaced the link itself; it did not move a link INTO the old directory
    assert os.readlink(link) == str(tmp_path / "r2")
    assert sorted(os.listdir(tmp_path / "r1")) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current", "r1", "r2"]
    assert len(conn.commands) == 1       # one execution per module run


def test_symlink_refuses_to_replace_a_directory_or_a_file_without_force(tmp_path):
    (tmp_path / "dir").mkdir()
    res, _ = run_module("symlink", {"path": str(tmp_path / "dir"), "src": "/x"})
    assert res.failed and "is a directory" in res.msg
    (tmp_path / "file").write_text("x")
    res, _ = run_module("symlink", {"path": str(tmp_path / "file"), "src": "/x"})
    assert res.failed and "force" in res.msg
    res, _ = run_module("symlink", {"path": str(tmp_path / "file"), "src": "/x",
                                    "force": True})
    assert res.changed and os.readlink(tmp_path / "file") == "/x"


def test_file_and_directory_states(tmp_path):
    target = tmp_path / "a" / "b"
    res, _ = run_module("directory", {"path": str(target), "mode": "0750"}, check=True)
    assert res.changed and not target.exists()
    res, _ = run_module("directory", {"path": str(target), "mode": "0750"})
    assert res.changed and target.is_dir() and (target.stat().st_mode & 0o777) == 0o750
    res, _ = run_module("directory", {"path": str(target), "mode": "0750"})
    assert not res.changed
    res, _ = run_module("file", {"path": str(target / "f"), "state": "touch", "mode": "0600"})
    assert res.changed and (target / "f").stat().st_mode & 0o777 == 0o600
    res, _ = run_module("file", {"path": str(target / "f"), "state": "touch", "mode": "0600"})
    assert not res.changed
    res, _ = run_module("file", {"path": str(target / "missing")})
    assert res.failed and "does not exist" in res.msg
    res, _ = run_module("file", {"path": str(tmp_path / "a"), "state": "absent"})
    assert res.changed and not (tmp_path / "a").exists()


def test_copy_writes_content_and_reports_a_diff(tmp_path):
    dest = tmp_path / "c.txt"
    dest.write_text("old line\n")
    res, _ = run_module("copy", {"dest": str(dest), "content": "new line\n"}, check=True)
    assert res.changed and dest.read_text() == "old line\n"
    diff = res.diffs[0].unified()
    assert "-old line" in diff and "+new line" in diff
    res, _ = run_module("copy", {"dest": str(dest), "content": "new line\n", "mode": "0600"})
    assert res.changed and dest.read_text() == "new line\n"
    res, _ = run_module("copy", {"dest": str(dest), "content": "new line\n", "mode": "0600"})
    assert not res.changed


def test_command_and_shell_keep_hostile_values_literal(tmp_path):
    canary = tmp_path / "CANARY"
    hostile = f"x$(touch {canary}); touch {canary} `touch {canary}`"
    res, _ = run_module("command", {"argv": ["printf", "%s", hostile]})
    assert res.data["stdout"] == hostile
    res, _ = run_module("command", {"argv": ["pwd"], "chdir": str(tmp_path)})
    assert res.data["stdout"] == str(tmp_path)
    res, _ = run_module("command", {"argv": ["sh", "-c", 'printf %s "$V"'],
                                    "env": {"V": hostile}})
    assert res.data["stdout"] == hostile
    res, _ = run_module("shell", {"cmd": 'printf "%s|%s" "$1" "$#"', "args": [hostile]})
    assert res.data["stdout"] == f"{hostile}|1"
    res, _ = run_module("shell", {"cmd": "exit 3"})
    assert res.failed and res.data["rc"] == 3 and res.msg == "exit 3"
    assert not canary.exists()


def test_mode_must_be_quoted_text():
    with pytest.raises(ValueError, match="quoted octal"):
        run_module("file", {"path": "/tmp/x", "mode": 420})
