"""The engine in the release: a container release runs its image by ID through the
container unit, a venv release runs the venv's executable, the engine's identity is part of
the release id and of its recorded summary, and a host release is rendered as before."""

from __future__ import annotations

import json

from ascendctl.deploy.history import engine_cell
from ascendctl.deploy.release import plan_release
from ascendctl.engine.kinds.container import image_identity
from ascendctl.engine.kinds.host import host_identity
from ascendctl.engine.kinds.venv import venv_identity_of
from ascendctl.engine.present import kept_engines

from tests.unit.test_engine_container_render import container_inventory
from tests.unit.test_plan_inventories import make_inventory

IMAGE_A = image_identity("sha256:" + "a1" * 32, "quay.io/ascend/vllm-ascend:v0.23.0.post1")
IMAGE_B = image_identity("sha256:" + "b2" * 32, "quay.io/ascend/vllm-ascend:v0.23.0.post1")
API_KEY = "sk-release-test-9d3f"


def files_of(plan, node="node0"):
    return {f.path: f for f in plan.files[node]}


def with_key(data):
    data["all"]["vars"]["serving"]["api_key"] = {"env": "ASCENDCTL_TEST_RELEASE_KEY"}


def test_container_release_runs_the_image_by_id_in_the_container_unit(tmp_path):
    inv = container_inventory(tmp_path)
    plan = plan_release(inv, engine=IMAGE_A)
    files = files_of(plan)
    argv = json.loads(files["engine.json"].content)["argv"]
    assert argv[:3] == ["/usr/bin/podman", "run", "--rm"]
    assert IMAGE_A.id in argv and "quay.io/ascend/vllm-ascend:v0.23.0.post1" not in argv
    inner = argv[argv.index(IMAGE_A.id) + 1:]
    # the image's entrypoint runs sh, which sources the mounted secrets file, then execs
    # engine.command (not serving.engine)
    assert not any(a.startswith("--entrypoint") for a in argv)
    assert inner[:4] == ["/bin/sh", "-c", 'set -a; . "$0"; set +a; exec "$@"',
                         "/run/ascendctl/secrets.env"]
    assert inner[4:6] == ["vllm", "serve"]
    unit = files["units/ascendctl-engine.service"].content.decode()
    assert "ExecStop=/usr/bin/podman stop --ignore --time=10 ascendctl-engine" in unit
    assert f"image {IMAGE_A.id[7:19]}" in unit
    assert plan.summary["engine"] == {"kind": "container", "id": IMAGE_A.id,
                                      "short": IMAGE_A.short,
                                      "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1",
                                      "runtime": "podman", "runtime_path": "/usr/bin/podman"}


def test_a_different_image_is_a_different_release(tmp_path):
    inv = container_inventory(tmp_path)
    first, again, other = (plan_release(inv, engine=e) for e in (IMAGE_A, IMAGE_A, IMAGE_B))
    assert first.release_id == again.release_id
    assert other.release_id != first.release_id


def test_the_api_key_is_mounted_never_in_the_container_argv_or_unit(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_TEST_RELEASE_KEY", API_KEY)
    inv = container_inventory(tmp_path)
    data_inv = make_inventory(tmp_path, lambda d: (with_key(d), _container(d)), "keyed.yaml")
    plan = plan_release(data_inv, secrets={"api_key": API_KEY}, engine=IMAGE_A)
    files = files_of(plan)
    for path in ("engine.json", "engine.env", "units/ascendctl-engine.service"):
        assert API_KEY.encode() not in files[path].content, path
    assert API_KEY.encode() in files["secrets.env"].content and files["secrets.env"].mode == 0o600
    argv = json.loads(files["engine.json"].content)["argv"]
    release = plan.directory(data_inv)
    assert f"--volume={release}/secrets.env:/run/ascendctl/secrets.env:ro" in argv
    assert "EnvironmentFile=-" not in files["units/ascendctl-engine.service"].content.decode()
    assert inv.engine.kind == "container"


def _container(data):
    variables = data["all"]["vars"]
    variables["serving"].pop("engine", None)
    variables["engine"] = {"kind": "container", "runtime": "podman",
                           "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1"}


def test_venv_release_runs_the_venv_executable(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def venv(data):
        data["all"]["vars"]["serving"].pop("engine", None)
        data["all"]["vars"]["engine"] = {"kind": "venv", "wheelhouse": str(wheels)}

    inv = make_inventory(tmp_path, venv)
    identity = venv_identity_of("venv:" + "c3" * 32, {"python": "/usr/bin/python3"})
    plan = plan_release(inv, engine=identity)
    argv = json.loads(files_of(plan)["engine.json"].content)["argv"]
    assert argv[0] == f"{inv.deploy.root}/engines/venv/{'c3' * 32}/bin/vllm"
    assert argv[1] == "serve"
    other = plan_release(inv, engine=venv_identity_of("venv:" + "d4" * 32))
    assert other.release_id != plan.release_id
    assert plan.summary["engine"]["short"] == "venv-" + "c3" * 6


def test_host_release_id_does_not_depend_on_the_engine_record(tmp_path):
    inv = make_inventory(tmp_path)
    plain = plan_release(inv)
    recorded = plan_release(inv, engine=host_identity(inv.serving.engine))
    assert plain.release_id == recorded.release_id
    assert recorded.summary["engine"]["kind"] == "host"
    argv = json.loads(files_of(recorded)["engine.json"].content)["argv"]
    assert argv[0] == inv.serving.engine


def test_history_cell_and_kept_engines():
    assert engine_cell({"kind": "container", "short": "img-a1a1a1a1a1a1",
                        "image": "localhost/x:v1"}) == "img-a1a1a1a1a1a1 localhost/x:v1"
    assert engine_cell({"kind": "host", "short": "host"}) == "host"
    assert engine_cell(None) == ""
    venv = venv_identity_of("venv:" + "c3" * 32)
    images, venvs = kept_engines({"r-1": IMAGE_A, "r-2": IMAGE_A, "r-3": venv,
                                  "r-4": host_identity("vllm")})
    assert images == [IMAGE_A.id] and venvs == ["c3" * 32]
