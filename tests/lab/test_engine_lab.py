"""The engine as a container and as an offline venv on a lab node, for real: the archive
relayed into the node's store and loaded with podman through the engine node operations,
the rendered container unit under systemd serving a completion through the API key (the
key in no argv and not in `podman inspect`), stop and kill -9 leaving no stale container;
and a venv built on the node from the lab wheelhouse serving a completion.

Run under the engine slot: flock /run/lock/ascendctl-engine-slot pytest tests/lab/test_engine_lab.py
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tarfile
import io
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab

API_KEY = "h4-lab-key-7f3e91c2"
RELEASE_ID = "engine-lab"
COMPLETION_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def elab():
    require_lab()
    from ascendctl.lab import Lab

    lab = Lab(unique_lab_name("h4e"))
    try:
        lab.up(nodes=1, engine="container")
        yield lab
    finally:
        lab.down()


def sh(lab, command: str, *, check: bool = True, stdin: bytes | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(lab.ssh_argv("node0", command), input=stdin, capture_output=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command}: {proc.returncode}: {proc.stderr.decode()[-800:]}")
    return proc


def put(lab, path: str, data: bytes, mode: str = "644") -> None:
    sh(lab, f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {shlex.quote(path)} "
            f"&& chmod {mode} {shlex.quote(path)}", stdin=data)


def put_tree(lab, source: Path, dest: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(source, arcname=".")
    sh(lab, f"mkdir -p {shlex.quote(dest)} && tar -x -C {shlex.quote(dest)}",
       stdin=buffer.getvalue())


def complete(address: str, *, key: str | None, timeout: float) -> dict:
    """A real completion (health says nothing, FACTS.md), retried until it answers."""
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 4}).encode()
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"http://{address}:8000/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())
        except Exception as err:       # not up yet (refused, 503, ...)
            last = err
            if getattr(err, "code", None) == 401:
                raise
        time.sleep(2)
    raise AssertionError(f"no completion within {timeout:.0f} s: {last}")


def containers(lab) -> list[dict]:
    out = sh(lab, "podman ps -a --format json").stdout
    return json.loads(out or b"[]")


def test_container_engine_under_systemd(elab, tmp_path):
    from ascendctl.engine.present import ensure_engine, plan_engine
    from ascendctl.inventory import load_inventory
    from ascendctl.render import release_dir, render_release
    from ascendctl.render import timeouts
    from ascendctl.render.container import CONTAINER_NAME, launch_argv, render_unit
    from ascendctl.render.engine import engine_argv, engine_environment
    from ascendctl.render.release import SECRET_ENV_KEY
    from ascendctl.transport import SshPool
    from ascendctl.paths import runtime_dir

    import yaml

    data = yaml.safe_load(Path(elab.inventory_path).read_text())
    data["all"]["vars"]["serving"]["api_key"] = {"env": "H4_ENGINE_LAB_KEY"}
    path = tmp_path / "container-inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    inv = load_inventory(path)
    assert inv.engine.kind == "container" and inv.engine.archive
    pool = SshPool(inv.hosts)
    try:
        plan = plan_engine(inv, pool)
        first = ensure_engine(inv, pool, plan, show_progress=False)
        assert first["node0"].changed                   # relayed, then loaded
        again = ensure_engine(inv, pool, plan, show_progress=False)
        assert not again["node0"].changed               # present: nothing loaded twice
    finally:
        pool.close()
    image_id = plan.identity.id
    listed = sh(elab, "podman image inspect --format '{{.Id}}' "
                + shlex.quote(inv.engine.image)).stdout.decode().strip()
    assert "sha256:" + listed == image_id

    # the release as deploy lays it out, with the container's argv and unit
    host = inv.head
    release = release_dir(inv.deploy.root, RELEASE_ID)
    files = {f.path: f for f in render_release(inv, release_id=RELEASE_ID,
                                               secrets={"api_key": API_KEY})["node0"]}
    env = engine_environment(inv, host, release)
    argv = launch_argv(inv, release=release,
                       host_argv=engine_argv(inv, host, release, checkpoint_dtype=None),
                       env_names=[k for k, _ in env], image=image_id,
                       secrets_file=f"{release}/secrets.env")
    launch = json.loads(files["engine.json"].content)
    launch["argv"] = argv
    unit = render_unit(inv.engine, headless=False, image=image_id, cluster=inv.cluster.name,
                       release_id=RELEASE_ID, release=release, host=host,
                       python=inv.deploy.python, startup_timeout=inv.serving.startup_timeout,
                       stop_grace=timeouts.STOP_GRACE_S, restart_sec=2,
                       start_limit_burst=10, start_limit_interval=600)
    for rel in ("engine.env", "hccl.json"):
        put(elab, f"{release}/{rel}", files[rel].content)
    put(elab, f"{release}/secrets.env", files["secrets.env"].content, "600")
    put(elab, f"{release}/engine.json", json.dumps(launch).encode())
    put_tree(elab, runtime_dir(), f"{release}/runtime/ascendctl_runtime")
    put_tree(elab, elab.model_dir, f"{release}/model")
    put(elab, "/etc/systemd/system/ascendctl-engine.service", unit.encode())
    verify = sh(elab, "systemd-analyze verify /etc/systemd/system/ascendctl-engine.service",
                check=False)
    assert verify.returncode == 0, verify.stderr.decode()

    sh(elab, "systemctl daemon-reload && systemctl start ascendctl-engine.service")
    try:
        answer = complete(elab.node("node0").mgmt_ip, key=API_KEY,
                          timeout=COMPLETION_TIMEOUT_S)
        assert answer["usage"]["completion_tokens"] >= 1
        with pytest.raises(Exception) as denied:
            complete(elab.node("node0").mgmt_ip, key="wrong-key", timeout=20)
        assert getattr(denied.value, "code", None) == 401

        (running,) = containers(elab)
        assert running["Names"] == [CONTAINER_NAME]
        assert running["ImageID"] == image_id.removeprefix("sha256:")
        # the key is in no process's argv and nowhere in the container's recorded config
        argvs = sh(elab, "ps -eo args=").stdout.decode()
        assert API_KEY not in argvs and "podman run" in argvs
        inspect = sh(elab, f"podman inspect {CONTAINER_NAME}").stdout.decode()
        assert API_KEY not in inspect and SECRET_ENV_KEY not in json.loads(inspect)[0][
            "Config"]["CreateCommand"]
        journal = sh(elab, "journalctl -u ascendctl-engine --no-pager").stdout.decode()
        assert API_KEY not in journal

        # kill -9 of the container's main process: systemd restarts it, no stale container
        pid = json.loads(inspect)[0]["State"]["Pid"]
        old_id = running["Id"]
        sh(elab, f"kill -9 {int(pid)}")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = containers(elab)
            if len(now) == 1 and now[0]["Id"] != old_id and now[0]["State"] == "running":
                break
            time.sleep(1)
        now = containers(elab)
        assert len(now) == 1 and now[0]["Id"] != old_id, now
        restarts = sh(elab, "systemctl show -p NRestarts --value ascendctl-engine").stdout
        assert int(restarts) >= 1
    finally:
        sh(elab, "systemctl stop ascendctl-engine.service", check=False, timeout=200)
    assert containers(elab) == []
    assert sh(elab, "pgrep -x conmon", check=False).returncode == 1
    # stopped by SIGTERM: the launcher exits 143, which the unit counts as success
    assert sh(elab, "systemctl is-active ascendctl-engine", check=False).stdout.strip() \
        == b"inactive"


def test_venv_engine_from_the_wheelhouse(elab, tmp_path):
    import yaml

    from ascendctl.engine.present import ensure_engine, plan_engine, venv_command
    from ascendctl.inventory import load_inventory
    from ascendctl.lab.wheelhouse import build_wheelhouse
    from ascendctl.transport import SshPool

    data = yaml.safe_load(Path(elab.inventory_path).read_text())
    data["all"]["vars"]["engine"] = {"kind": "venv", "wheelhouse": str(build_wheelhouse()),
                                     "command": "vllm"}
    path = tmp_path / "venv-inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    inv = load_inventory(path)
    pool = SshPool(inv.hosts)
    try:
        plan = plan_engine(inv)
        built = ensure_engine(inv, pool, plan, show_progress=False)
        assert built["node0"].changed
        assert not ensure_engine(inv, pool, plan, show_progress=False)["node0"].changed
    finally:
        pool.close()
    vllm = venv_command(inv.deploy.root, plan.identity, "vllm")
    model = "/root/engine-lab-model"
    put_tree(elab, elab.model_dir, model)
    serve = [vllm, "serve", model, "--host", "0.0.0.0", "--port", "8000",
             "--served-model-name", "tiny", "--max-model-len", "256", "--dtype", "bfloat16",
             "--enforce-eager"]
    sh(elab, shlex.join(["systemd-run", "--unit=h4-venv-engine", "--collect",
                         "--setenv=HF_HUB_OFFLINE=1", "--setenv=VLLM_CPU_KVCACHE_SPACE=1",
                         "--setenv=VLLM_CPU_OMP_THREADS_BIND=0", *serve]))
    try:
        try:
            answer = complete(elab.node("node0").mgmt_ip, key=None,
                              timeout=COMPLETION_TIMEOUT_S)
        except AssertionError:
            journal = sh(elab, "journalctl -u h4-venv-engine --no-pager | tail -40",
                         check=False).stdout.decode(errors="replace")
            raise AssertionError(f"the venv engine did not answer; its journal:\n{journal}")
        assert answer["usage"]["completion_tokens"] >= 1
        cmdline = sh(elab, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value "
                           "h4-venv-engine)/cmdline").stdout.decode()
        assert f"{inv.deploy.root}/engines/venv/" in cmdline, cmdline
    finally:
        sh(elab, "systemctl stop h4-venv-engine", check=False, timeout=120)
