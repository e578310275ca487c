"""`ascendctl render --show-secrets` says on stderr, in one line, which files now hold
cleartext secrets and that they are 0600; those files are 0600 (even over an older, looser
file) and every other file keeps its own mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ascendctl.cli.render import NAMED_FILES_MAX, cleartext_notice
from tests.unit.test_plan_inventories import EXAMPLE, make_inventory, serving

KEY = "sk-render-0a1b2c3d4e5f60718293"


def render(*args: str, cwd: Path, inventory: Path = EXAMPLE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendctl", "render", "-i", str(inventory),
                           *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "ASCENDCTL_API_KEY": KEY, "COLUMNS": "200"})


def modes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mode & 0o777
            for p in sorted(out.rglob("*")) if p.is_file()}


def notice_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "--show-secrets" in line]


def test_show_secrets_names_the_cleartext_files_and_they_alone_are_0600(tmp_path):
    out = tmp_path / "out"
    older = out / "node0" / "secrets.env"
    older.parent.mkdir(parents=True)
    older.write_text("left by hand\n")
    older.chmod(0o644)
    result = render("--out", str(out), "--show-secrets", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert KEY not in result.stdout + result.stderr
    holders = {str(p) for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()}
    assert holders == {str(out / "node0" / "secrets.env"), str(out / "node1" / "secrets.env")}
    [line] = notice_lines(result.stderr)
    assert line.startswith("warning: --show-secrets: 2 file(s) hold secrets in cleartext, "
                           "written 0600: ")
    assert set(line.split("written 0600: ", 1)[1].split(", ")) == holders
    found = modes(out)
    assert {name: mode for name, mode in found.items() if mode != 0o644} == \
        {"node0/secrets.env": 0o600, "node1/secrets.env": 0o600}
    assert "secrets in cleartext" in result.stdout


def test_without_show_secrets_nothing_is_cleartext_and_nothing_is_announced(tmp_path):
    out = tmp_path / "out"
    result = render("--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert notice_lines(result.stderr) == []
    assert not any(KEY.encode() in p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert modes(out)["node0/secrets.env"] == 0o600
    assert b"redacted" in (out / "node0" / "secrets.env").read_bytes()
    assert "secrets redacted" in result.stdout


def test_with_json_the_notice_stays_on_stderr_and_the_files_are_listed(tmp_path):
    out = tmp_path / "out"
    result = render("--out", str(out), "--show-secrets", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["secrets_shown"] is True
    assert sorted(answer["cleartext_secret_files"]) == \
        [str(out / "node0" / "secrets.env"), str(out / "node1" / "secrets.env")]
    assert len(notice_lines(result.stderr)) == 1
    assert KEY not in result.stdout + result.stderr


def test_an_inventory_without_secrets_says_none_was_written(tmp_path):
    def no_secrets(data):
        serving(data).pop("api_key")
        serving(data).setdefault("health", {})["supervise"] = False

    inv = make_inventory(tmp_path, no_secrets)
    result = render("--out", str(tmp_path / "out"), "--show-secrets", cwd=tmp_path,
                    inventory=inv.path)
    assert result.returncode == 0, result.stderr
    assert notice_lines(result.stderr) == [
        "note: --show-secrets: the inventory references no secret; no file holds one in "
        "cleartext"]
    assert not list((tmp_path / "out").rglob("secrets.env"))


def test_the_notice_stays_one_bounded_line_for_a_large_cluster(tmp_path):
    out = tmp_path / "out"
    same = [out / f"node{i}" / "secrets.env" for i in range(256)]
    line = cleartext_notice(out, same)
    assert line == (f"warning: --show-secrets: 256 file(s) hold secrets in cleartext, "
                    f"written 0600: {out}/<node>/secrets.env on each of the nodes")
    mixed = same + [out / "node0" / "other.env"]
    line = cleartext_notice(out, mixed)
    assert "\n" not in line and line.endswith(f" and {257 - NAMED_FILES_MAX} more")
    assert len(line) < 200 + NAMED_FILES_MAX * len(str(same[0]))


def test_help_says_the_option_writes_cleartext():
    result = subprocess.run([sys.executable, "-m", "ascendctl", "render", "--help"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert result.returncode == 0
    text = " ".join(result.stdout.replace("\u2502", " ").split())   # without the box
    assert "Write the secrets in CLEARTEXT" in text
    assert "mode 0600; stderr names every file that holds one" in text
