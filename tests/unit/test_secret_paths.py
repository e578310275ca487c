"""Where the API key may and may not go (issue 13): `inventory show` prints only its
reference; the engine reads it from the 0600 secrets env file, never from its argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"
KEY = "sk-unit-5e6f7a8b9c0d1e2f3a4b"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TEST_API_KEY": KEY})


def test_inventory_show_prints_the_reference_not_the_key(tmp_path):
    for extra in ([], ["--json"]):
        result = cli("inventory", "show", "-i", str(GOOD), *extra, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert KEY not in result.stdout + result.stderr
        assert "env:TEST_API_KEY" in result.stdout


def test_engine_gets_the_key_from_its_secrets_file_only(tmp_path):
    out = tmp_path / "out"
    result = cli("render", "-i", str(GOOD), "--out", str(out), "--show-secrets", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert KEY not in result.stdout + result.stderr
    holders = [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert holders and all(p.name == "secrets.env" for p in holders)
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in holders)
    for engine in out.rglob("engine.json"):
        argv = json.loads(engine.read_text())["argv"]
        assert not any("api-key" in arg or KEY in arg for arg in argv)
