"""Where the API key may and may not go (issue 13): `inventory show` prints only its
reference; the engine reads it from the 0600 secrets env file, never from its argv (`ps`)
or engine.json, whatever engine kind runs it and whatever spelling the inventory tried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from ascendctl.engine.kinds.venv import venv_identity_of
from ascendctl.errors import InputError
from ascendctl.inventory.secretoptions import is_secret_option
from ascendctl.render import render_release
from ascendctl.render.secrets import resolve_secrets
from tests.unit.test_plan_inventories import make_inventory
from tests.unit.test_secret_options import REFUSED_ARGS, K

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


RENDER_KEY = "sk-render-Zq7v9Lm2+Xc4/Rt8Wb="


def engine_kinds(tmp_path: Path):
    """The example inventory with its key as {env: ...}, once per engine kind."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def as_kind(kind):
        def edit(data):
            data["all"]["vars"]["serving"]["api_key"] = {"env": "RENDER_TEST_KEY"}
            if kind == "container":
                data["all"]["vars"]["serving"].pop("engine", None)
                data["all"]["vars"]["engine"] = {"kind": "container", "runtime": "podman",
                                                 "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1"}
            elif kind == "venv":
                data["all"]["vars"]["serving"].pop("engine", None)
                data["all"]["vars"]["engine"] = {"kind": "venv", "wheelhouse": str(wheels)}
        return edit

    venv = venv_identity_of("venv:" + "c3" * 32, {"python": "/usr/bin/python3"})
    for kind, identity in (("host", None), ("container", None), ("venv", venv)):
        yield kind, make_inventory(tmp_path, as_kind(kind), name=f"{kind}.yaml"), identity


def test_rendered_argv_and_units_never_hold_the_key(tmp_path, monkeypatch):
    """With the key where it belongs, every engine kind's engine.json argv and unit files
    hold no trace of it (as it is, JSON-escaped or URL-encoded): only the 0600 secrets.env."""
    monkeypatch.setenv("RENDER_TEST_KEY", RENDER_KEY)
    traces = [RENDER_KEY.encode(), json.dumps(RENDER_KEY)[1:-1].encode(),
              quote(RENDER_KEY, safe="").encode()]
    for kind, inv, identity in engine_kinds(tmp_path):
        secrets = resolve_secrets(inv)
        assert secrets["api_key"] == RENDER_KEY
        nodes = render_release(inv, release_id="r1", secrets=secrets, engine=identity)
        for node, files in nodes.items():
            holders = [f for f in files if any(t in f.content for t in traces)]
            assert [f.path for f in holders] == ["secrets.env"], (kind, node)
            assert holders[0].secret and holders[0].mode == 0o600
            argv = json.loads(next(f for f in files if f.path == "engine.json").content)["argv"]
            assert not [a for a in argv if is_secret_option(a.split("=", 1)[0])], (kind, argv)
            units = [f for f in files if f.path.startswith("units/")]
            assert units and not any(t in u.content for u in units for t in traces)


@pytest.mark.parametrize("args,index,shown", REFUSED_ARGS,
                         ids=[" ".join(map(str, a)).replace(K, "K") for a, _, _ in REFUSED_ARGS])
def test_no_spelling_of_the_key_in_extra_args_reaches_a_release(tmp_path, args, index, shown):
    """The other way to put the key into the argv, in every spelling: refused at load,
    so there is no release to render."""
    def edit(data):
        data["all"]["vars"]["serving"]["extra_args"] = args

    with pytest.raises(InputError) as caught:
        make_inventory(tmp_path, edit)
    assert f"a secret option ({shown})" in str(caught.value) and K not in str(caught.value)
