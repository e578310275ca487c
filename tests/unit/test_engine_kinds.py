"""The engine kinds behind their router: a fourth kind is one module plus its registry
entry (tests/unit/script_kind.py, registered here), and every kind's recorded engine
comes back from a release meta as the identity it recorded."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.checks import Status, run_checks
from ascendctl.deploy.release import plan_release
from ascendctl.engine import kinds
from ascendctl.engine.kinds import identity_from_record, kind_named, kind_of
from ascendctl.engine.kinds.container import image_identity
from ascendctl.engine.kinds.host import host_identity
from ascendctl.engine.kinds.venv import venv_identity_of
from ascendctl.engine.preflight import engine_expectation, engine_gather_params
from ascendctl.engine.present import engine_status, kept_engines, plan_engine
from ascendctl.errors import InputError
from ascendctl.render import render_release
from tests.unit.script_kind import ScriptKind, script_identity
from tests.unit.test_engine_container_render import container_inventory
from tests.unit.test_plan_inventories import make_inventory

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("node_outputs", ROOT / "tests" / "fixtures" / "node_outputs.py")
node_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(node_outputs)

SCRIPT = b"#!/bin/sh\nexec /opt/vllm/bin/vllm \"$@\"\n"


def script_engine(script: Path, **extra):
    def edit(data):
        data["all"]["vars"]["serving"].pop("engine", None)
        data["all"]["vars"]["engine"] = {"kind": "script", "command": str(script), **extra}
    return edit


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "serve.sh"
    path.write_bytes(SCRIPT)
    return path


@pytest.fixture
def script_kind(monkeypatch) -> ScriptKind:
    """The toy kind in the router's registry, for this test only."""
    kind = ScriptKind()
    monkeypatch.setitem(kinds.REGISTRY, kind.name, kind)
    return kind


def test_an_unregistered_kind_is_refused_at_its_line(tmp_path, script):
    with pytest.raises(InputError) as err:
        make_inventory(tmp_path, script_engine(script))
    assert err.value.field == "all.vars.engine.kind"
    assert str(err.value).endswith("'script' is not one of 'host', 'container' or 'venv'")
    text = (tmp_path / "inventory.yaml").read_text().splitlines()
    assert text[err.value.line - 1].strip() == "kind: script"


def test_a_fourth_kind_is_one_module_and_its_registry_entry(tmp_path, script, script_kind):
    inv = make_inventory(tmp_path, script_engine(script))
    assert kind_of(inv.engine) is script_kind
    sha = hashlib.sha256(SCRIPT).hexdigest()

    identity = kind_of(inv.engine).identity(inv)
    assert identity == script_identity(sha) and identity.short == f"script-{sha[:12]}"

    # render: engine.json runs the relayed script; the unit is the generic engine unit
    files = {f.path: f for f in render_release(inv, release_id="r1", checkpoint_dtype=None)["node0"]}
    argv = json.loads(files["engine.json"].content)["argv"]
    assert argv[:3] == ["/bin/sh", f"{inv.deploy.root}/store/sha256/{sha[:2]}/{sha}", "serve"]
    host_inv = make_inventory(tmp_path, name="host.yaml")
    host_files = {f.path: f for f in render_release(host_inv, release_id="r1",
                                                    checkpoint_dtype=None)["node0"]}
    assert files["units/ascendctl-engine.service"].content == \
        host_files["units/ascendctl-engine.service"].content
    assert argv[2:] == json.loads(host_files["engine.json"].content)["argv"][1:]

    # the release: the script is part of its id and of its meta, and comes back from it
    plan = plan_release(inv, engine=identity)
    assert plan.summary["engine"] == {"kind": "script", "id": f"script:{sha}",
                                      "short": f"script-{sha[:12]}"}
    assert identity_from_record(plan.summary["engine"]) == identity
    other = plan_release(inv, engine=script_identity("0" * 64))
    assert other.release_id != plan.release_id

    # present: the script travels through the relay; nothing else to load or build
    engine = plan_engine(inv)
    assert [f.entry.sha256 for f in engine.objects] == [sha]
    status = engine_status(inv, None, engine)
    assert {n.node for n in status.values() if n.changed} == {h.name for h in inv.hosts}
    assert kept_engines({"r-1": identity, "r-2": host_identity("vllm")}) == ([], [])

    # preflight: no container facts; the engine checks skip what it does not have and
    # the version checks judge the node's own Python
    assert engine_gather_params(inv) == {}
    expected = engine_expectation(inv)
    assert (expected.kind, expected.runtime, expected.image, expected.stack_from,
            expected.packages) == ("script", None, None, None, None)
    results = {r.check_id: r for r in run_checks(
        node_outputs.facts_of({"node0": node_outputs.healthy_a2(0)}),
        node_outputs.expectations(nodes=1, engine=expected),
        only=["engine.runtime", "engine.image", "versions.python_stack"])}
    assert results["engine.runtime"].status == Status.SKIP
    assert results["engine.runtime"].message == "engine.kind script: no container runtime"
    assert results["engine.image"].message == "engine.kind script: no image"
    assert results["versions.python_stack"].status == Status.PASS


@pytest.mark.parametrize("extra,field,words", [
    ({"image": "localhost/x:1"}, "engine.image", "applies to kind: container, not script"),
    ({"wheelhouse": "/srv/wh"}, "engine.wheelhouse", "applies to kind: venv, not script"),
    ({"command": "serve.sh"}, "engine.command", "the script's absolute path"),
])
def test_the_fourth_kinds_rules_come_from_its_module(tmp_path, script, script_kind, extra,
                                                    field, words):
    with pytest.raises(InputError) as err:
        make_inventory(tmp_path, script_engine(script, **extra))
    assert err.value.field == f"all.vars.{field}" and words in str(err.value)


def test_serving_engine_is_refused_for_the_fourth_kind_too(tmp_path, script, script_kind):
    def both(data):
        script_engine(script)(data)
        data["all"]["vars"]["serving"]["engine"] = "vllm"
    with pytest.raises(InputError) as err:
        make_inventory(tmp_path, both)
    assert err.value.field == "all.vars.serving.engine"
    assert "with engine.kind script the engine is engine.command (default vllm) shipped to " \
           "every node" in str(err.value)


def test_a_recorded_engine_comes_back_as_its_identity(tmp_path):
    """Rollback and prune read the release meta: what a kind records is what it reads."""
    container = container_inventory(tmp_path)
    venv = make_inventory(tmp_path, name="venv.yaml")
    for inv, identity in (
            (container, image_identity("sha256:" + "a1" * 32, container.engine.image)),
            (venv, venv_identity_of("venv:" + "c3" * 32, {"python": "/usr/bin/python3"}))):
        record = json.loads(json.dumps(kind_named(identity.kind).summary(inv, identity)))
        assert record["kind"] == identity.kind and record["short"] == identity.short
        back = identity_from_record(record)
        assert back == identity and back.short == identity.short
        assert back.detail == identity.detail


def test_a_host_engine_or_an_unknown_record_is_no_identity(tmp_path):
    inv = make_inventory(tmp_path)
    host = kind_named("host").summary(inv, host_identity("vllm"))
    assert host == {"kind": "host", "id": "host:vllm", "short": "host"}
    assert identity_from_record(host) is None          # a host release depends on no engine
    assert identity_from_record({"kind": "wasm", "id": "x"}) is None
    assert identity_from_record({}) is None


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_the_cli_loads_the_kinds_for_a_command_but_not_for_its_help(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text((ROOT / "inventory.example.yaml").read_text())
    code = ("import sys\nfrom typer.testing import CliRunner\nimport ascendctl.cli as cli\n"
            "cli._register_commands()\nresult = CliRunner().invoke(cli.app, sys.argv[1:])\n"
            "print(result.exit_code, 'ascendctl.engine.kinds' in sys.modules)")
    assert _python(code, "deploy", "--help").stdout.split() == ["0", "False"]
    assert _python(code, "inventory", "check", "-i", str(path)).stdout.split() == ["0", "True"]


def test_loading_an_inventory_without_the_kinds_says_so(tmp_path):
    """A caller of the library that parses with ascendctl.inventory (without
    ascendctl.load, which registers the kinds) gets told, not an inventory error."""
    path = tmp_path / "inventory.yaml"
    path.write_text((ROOT / "inventory.example.yaml").read_text())
    result = _python("import sys\nfrom ascendctl.inventory import load_inventory\n"
                     "load_inventory(sys.argv[1], check_files=False)", str(path))
    assert result.returncode == 1
    assert "internal: no engine kinds are registered: load inventories with " \
        "ascendctl.load.load_inventory" in result.stderr
