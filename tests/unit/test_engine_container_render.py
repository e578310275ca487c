"""The container engine's run command line and unit: complete, deterministic, no secret
in any argv, and accepted by systemd-analyze verify."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ascendctl.engine.container_run import (
    SECRETS_IN_CONTAINER, ContainerRun, launch_argv, remove_argv, run_argv, stop_argv,
)
from ascendctl.engine.kinds.container import image_identity
from ascendctl.inventory.engine import EngineSpec
from ascendctl.render import release_dir, render_release
from ascendctl.render.engine import engine_argv, engine_environment
from tests.unit.test_plan_inventories import make_inventory
from tests.unit.test_render_validators import tool

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "engine"
IMAGE_ID = "sha256:" + "ab" * 32


def container_inventory(tmp_path, runtime="podman", chip=None, runtime_path=None, root=None):
    def edit(data):
        variables = data["all"]["vars"]
        variables["serving"].pop("engine", None)
        variables["engine"] = {"kind": "container", "runtime": runtime,
                               "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1",
                               "mounts": [{"source": "/srv/cache", "target": "/root/.cache",
                                           "read_only": False}]}
        if runtime_path:
            variables["engine"]["runtime_path"] = runtime_path
        if root:
            variables["deploy"]["root"] = root
    return make_inventory(tmp_path, edit)


def rendered(inv, host_name="node0"):
    host = inv.host(host_name)
    release = release_dir(inv.deploy.root, "r1")
    argv = engine_argv(inv, host, release, checkpoint_dtype=None)
    env = engine_environment(inv, host, release)
    return launch_argv(inv, release=release, host_argv=argv, env_names=[k for k, _ in env],
                       image=IMAGE_ID, secrets_file=f"{release}/secrets.env"), env


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_run_argv_gives_devices_driver_files_and_model_read_only(tmp_path, runtime):
    inv = container_inventory(tmp_path, runtime)
    argv, env = rendered(inv)
    assert argv[:4] == [f"/usr/bin/{runtime}", "run", "--rm", "--name=ascendctl-engine"]
    assert ("--replace" in argv) == (runtime == "podman")
    for flag in ("--network=host", "--ipc=host", "--pull=never"):
        assert flag in argv
    devices = [a.split("=", 1)[1] for a in argv if a.startswith("--device=")]
    assert devices == [f"/dev/davinci{i}" for i in range(8)] + [
        "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    volumes = [a.split("=", 1)[1] for a in argv if a.startswith("--volume=")]
    for path in ("/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
                 "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info",
                 "/var/lib/ascendctl/releases/r1/model", "/var/lib/ascendctl/store",
                 "/var/lib/ascendctl/releases/r1/hccl.json"):
        assert f"{path}:{path}:ro" in volumes
    assert f"/var/lib/ascendctl/releases/r1/secrets.env:{SECRETS_IN_CONTAINER}:ro" in volumes
    assert "/srv/cache:/root/.cache" in volumes
    # the environment by name only: no value of it in the argv
    names = [a.split("=", 1)[1] for a in argv if a.startswith("--env=")]
    assert names == [k for k, _ in env] and "=" not in "".join(names)
    assert not any(a.startswith("--env=") and "=" in a[6:] for a in argv)
    assert not any("VLLM_API_KEY" in a or "--env-file" in a for a in argv)
    # the image's own entrypoint runs (it sets CANN's environment): the image is followed
    # by the command, the key sourced from the mounted file just before the engine starts
    assert not any(a.startswith("--entrypoint") for a in argv)
    image_at = argv.index(IMAGE_ID)
    assert argv[image_at - 1] == f"--volume=/var/lib/ascendctl/releases/r1/secrets.env:" \
                                 f"{SECRETS_IN_CONTAINER}:ro"
    assert argv[image_at + 1:image_at + 5] == ["/bin/sh", "-c",
                                               'set -a; . "$0"; set +a; exec "$@"',
                                               SECRETS_IN_CONTAINER]
    assert argv[image_at + 5:image_at + 7] == ["vllm", "serve"]


def test_a3_gets_sixteen_devices_and_private_ipc_a_shm(tmp_path):
    def edit_spec(spec: EngineSpec) -> EngineSpec:
        return spec.model_copy(update={"ipc": "private", "shm_size": "32g"})
    inv = container_inventory(tmp_path)
    spec = edit_spec(inv.engine)
    argv = run_argv(spec, ContainerRun(image=IMAGE_ID, engine_argv=["vllm", "serve", "/m"],
                                       env_names=["A"], npus=16, read_only_paths=["/m"]))
    assert [a for a in argv if a.startswith("--device=/dev/davinci1")][-1] == "--device=/dev/davinci15"
    assert "--ipc=private" in argv and "--shm-size=32g" in argv
    # no secrets: the engine command itself follows the image, for the image's entrypoint
    assert not any(a.startswith("--entrypoint") for a in argv)
    assert argv[argv.index(IMAGE_ID) + 1:] == ["vllm", "serve", "/m"]
    assert not any("secrets.env" in a for a in argv)


def test_stop_and_remove_never_fail_on_a_missing_container(tmp_path):
    podman = container_inventory(tmp_path).engine
    assert stop_argv(podman) == ["/usr/bin/podman", "stop", "--ignore", "--time=10",
                                 "ascendctl-engine"]
    assert remove_argv(podman) == ["/usr/bin/podman", "rm", "--force", "--ignore",
                                   "ascendctl-engine"]
    docker = podman.model_copy(update={"runtime": "docker"})
    assert remove_argv(docker) == ["/usr/bin/docker", "rm", "--force", "ascendctl-engine"]


def unit_text(inv):
    """The head's engine unit of release r1, as the renderer writes it."""
    files = render_release(inv, release_id="r1", checkpoint_dtype=None,
                           engine=image_identity(IMAGE_ID, inv.engine.image))[inv.head.name]
    return next(f for f in files if f.path == "units/ascendctl-engine.service").content.decode()


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_unit_matches_golden(tmp_path, runtime):
    inv = container_inventory(tmp_path, runtime)
    text = unit_text(inv)
    assert text == unit_text(container_inventory(tmp_path, runtime))       # deterministic
    golden = GOLDEN / f"ascendctl-engine-{runtime}.service"
    if os.environ.get("ASCENDCTL_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()
    assert "ExecStopPost=-/usr/bin/" + runtime + " rm --force" in text
    assert ("Requires=docker.service" in text) == (runtime == "docker")


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_unit_passes_systemd_analyze_verify(tmp_path, runtime):
    fake = tmp_path / "bin" / runtime          # verify checks that executables exist
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    root = tmp_path / "deploy root"
    inv = container_inventory(tmp_path, runtime, runtime_path=str(fake), root=str(root))
    release = Path(release_dir(inv.deploy.root, "r1"))
    (release / "runtime").mkdir(parents=True)
    (release / "engine.env").write_text("A=1\n")
    unit = tmp_path / "units" / "ascendctl-engine.service"
    unit.parent.mkdir()
    unit.write_text(unit_text(inv).replace("Requires=docker.service\n", "")
                    .replace(" docker.service", ""))
    result = subprocess.run([tool("systemd-analyze"), "verify", str(unit)],
                            capture_output=True, text=True)
    ours = [ln for ln in (result.stdout + result.stderr).splitlines() if "ascendctl-" in ln]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr
    broken = unit.read_text().replace("ExecStop=" + str(fake), "ExecStop=/nonexistent/podman")
    unit.write_text(broken)
    result = subprocess.run([tool("systemd-analyze"), "verify", str(unit)],
                            capture_output=True, text=True)
    assert result.returncode != 0 or "nonexistent" in result.stdout + result.stderr


def test_host_engine_release_is_unchanged(tmp_path):
    inv = make_inventory(tmp_path)
    files = render_release(inv, release_id="r1")["node0"]
    unit = next(f for f in files if f.path == "units/ascendctl-engine.service")
    assert b"podman" not in unit.content
