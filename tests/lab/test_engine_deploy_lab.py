"""The serving engine as part of the release, end to end on the lab with the real vLLM CPU
build (issue 14's acceptance), the container kind: a 2-node lab with podman on the nodes;
the tests run in order, each starting from the state the previous one left (deploys take
minutes):

container (`lab up --engine container`: podman, the lab engine image moved as an archive)
  A  deploy with an API key: the archive is relayed and loaded, every node runs the engine
     as a container of the archive's image (podman ps), a completion answers; the engine
     has the environment the image's ENTRYPOINT sets (CANN's set_env.sh files); the key is
     in no argv (ps), no `podman inspect`, no output, journal, JSON or JUnit; a no-op
     redeploy loads nothing and restarts nothing
  B  refused before any engine stops, naming the node, the release serving on: a truncated
     archive, a corrupt one (podman load fails on the node), an image that one node lacks
     with no archive; another container given the NPUs (preflight gate)
  C  preflight reads the image's CANN against the simulated driver: a pass, then a
     mismatch (`lab fault driver-old`), and from the archive for an image not loaded yet
  D  engine upgrade (`lab engine-image --tag v2`: the same layers, another config): a new
     release running the v2 image, loaded on each node from its config alone (every layer
     is there: nothing relayed); rollback to the v1 image, history shows both; a stop
     leaves no container

The venv kind (E) runs on the engine suite's shared lab: test_engine_venv_lab.py.

Run under the engine slot: flock /run/lock/ascendctl-engine-slot pytest tests/lab/test_engine_deploy_lab.py
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab

API_KEY = "sk-h7-engine-" + "5c1d9e7a3b2f4068"
KEY_ENV = "ASCENDCTL_TEST_ENGINE_KEY"
TIMEOUT = 1800
ROOT = "/var/lib/ascendctl"


def ascendctl(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def ssh(lab, node: str, command: str, check: bool = True) -> str:
    """Over SSH (container features are only real with nspawn's seccomp filter)."""
    proc = subprocess.run(lab.ssh_argv(node, command), capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{node}: {command}: rc {proc.returncode}: {proc.stderr[-600:]}")
    return proc.stdout


def write_inventory(state, name: str, **engine) -> Path:
    data = yaml.safe_load(Path(state["lab"].inventory_path).read_text())
    variables = data["all"]["vars"]
    variables["serving"]["api_key"] = {"env": KEY_ENV}
    variables["engine"].update(engine)
    for key, value in list(variables["engine"].items()):
        if value is None:
            del variables["engine"][key]
    path = state["dir"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def engine_pids(lab) -> dict[str, int]:
    return {n.name: int(ssh(lab, n.name, "systemctl show -p MainPID --value ascendctl-engine")
                        .strip() or 0) for n in lab.nodes}


def engine_environment(lab, node: str) -> dict[str, str]:
    """The engine process's argv and the variables CANN's set_env.sh files set, from
    /proc on the node: the process the container's init (catatonit, --init) started.
    Only these names are read: the process's environment also holds the API key."""
    script = ("init=$(podman inspect --format '{{.State.Pid}}' ascendctl-engine) && "
              "pid=$(ps -o pid= --ppid \"$init\" | head -n 1 | tr -d ' ') && "
              "tr '\\0' ' ' < /proc/$pid/cmdline && echo && "
              "tr '\\0' '\\n' < /proc/$pid/environ | "
              "grep -E '^(ASCEND_TOOLKIT_HOME|ASCEND_HOME_PATH|PATH)='")
    args, *variables = ssh(lab, node, script).splitlines()
    return {"args": args.strip(), **dict(v.split("=", 1) for v in variables)}


def containers(lab, node: str) -> list[dict]:
    return json.loads(ssh(lab, node, "podman ps --format json") or "[]")


def complete(lab, key: str | None = API_KEY) -> str:
    """A completion sent from the follower to the head's API (a real client)."""
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 4, "temperature": 0})
    auth = f"-H {shlex.quote('Authorization: Bearer ' + key)} " if key else ""
    out = ssh(lab, "node1", f"curl -s --max-time 120 {auth}-H 'Content-Type: application/json' "
                            f"-d {shlex.quote(body)} http://{lab.nodes[0].mgmt_ip}:8000/v1/completions")
    return json.loads(out)["choices"][0]["text"]


def deployed(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return json.loads(result.stdout)


def tasks(report: dict, module: str) -> list[dict]:
    return [t for play in report["plays"] for t in play["tasks"] if t.get("module") == module]


def changed_count(report: dict) -> int:
    return sum(counts["changed"] for counts in report["recap"].values())


# -- container -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clab(tmp_path_factory):
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("h7c")).up(nodes=2, engine="container")
    state = {"lab": lab, "dir": tmp_path_factory.mktemp("engine-container")}
    state["v1"] = write_inventory(state, "v1")
    yield state
    lab.down()


def test_a_container_deploy_serves_and_the_key_stays_secret(clab):
    from ascendctl.engine.identity import read_archive

    lab, inv = clab["lab"], clab["v1"]
    archive = yaml.safe_load(inv.read_text())["all"]["vars"]["engine"]["archive"]
    image_id = read_archive(archive).image_id
    from ascendctl.weights.files_push import hashed_files

    (held,) = hashed_files([Path(archive)])
    sha = held.entry.sha256
    junit = clab["dir"] / "deploy.xml"
    report = deployed(ascendctl("deploy", "-i", str(inv), "--yes", "--json", "--junit", str(junit)))
    (present,) = tasks(report, "engine_present")
    assert {h: r["status"] for h, r in present["hosts"].items()} == \
        {"node0": "changed", "node1": "changed"}
    for node in ("node0", "node1"):
        (box,) = containers(lab, node)
        assert box["Names"] == ["ascendctl-engine"] and box["State"] == "running"
        assert "sha256:" + box["ImageID"] == image_id
        # the relayed archive is gone once loaded: the image lives in podman's storage
        assert ssh(lab, node, f"test -e {ROOT}/store/sha256/{sha[:2]}/{sha} && echo kept || "
                              "echo gone").strip() == "gone"
    assert complete(lab)
    clab["release_v1"] = report["outcome"]["release_id"]
    clab["image_v1"] = image_id

    # the image's entrypoint ran: the engine has the variables it sets (the image's ENV
    # has none of them), and it is the engine that the runtime's init started
    for node in ("node0", "node1"):
        image_env = json.loads(ssh(lab, node, f"podman image inspect --format "
                                              f"'{{{{json .Config.Env}}}}' {image_id[7:]}"))
        assert not any(v.startswith("ASCEND_") for v in image_env), image_env
        engine = engine_environment(lab, node)
        # the entrypoint's bash and the secrets' sh exec'd, not forked: it is vLLM itself
        assert "vllm" in engine["args"].lower() and "sh -c" not in engine["args"], engine["args"]
        assert engine["ASCEND_TOOLKIT_HOME"] == "/usr/local/Ascend/ascend-toolkit/latest"
        assert engine["ASCEND_HOME_PATH"] == "/usr/local/Ascend/ascend-toolkit/latest"
        path = engine["PATH"].split(":")
        assert path[0] == "/usr/local/Ascend/ascend-toolkit/latest/tools/bishengir/bin", path
        assert "/usr/local/Ascend/ascend-toolkit/latest/bin" in path and "/opt/vllm/bin" in path

    # the key: in no argv, not in the container's recorded config, no output or log
    for node in ("node0", "node1"):
        assert API_KEY not in ssh(lab, node, "ps -eo args=")
        assert API_KEY not in ssh(lab, node, "podman inspect ascendctl-engine")
        assert API_KEY not in ssh(lab, node, "journalctl --no-pager -u ascendctl-engine")
    assert API_KEY not in json.dumps(report) and API_KEY not in junit.read_text()

    # no-op: nothing loaded, nothing restarted, the same release
    pids = engine_pids(lab)
    plain = ascendctl("deploy", "-i", str(inv), "--yes")
    assert plain.returncode == 0, plain.stdout[-2000:]
    assert API_KEY not in plain.stdout + plain.stderr
    again = deployed(ascendctl("deploy", "-i", str(inv), "--yes", "--json"))
    assert again["outcome"]["release_id"] == clab["release_v1"] and changed_count(again) == 0
    assert engine_pids(lab) == pids


def _refused(clab, inv: Path, *, step: str, names: str, host: str | None = None) -> None:
    pids = engine_pids(clab["lab"])
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-1000:]
    report = json.loads(result.stdout)
    failed = [(t["name"], h, r.get("msg", "")) for p in report["plays"] for t in p["tasks"]
              for h, r in t["hosts"].items() if r["status"] == "failed"]
    assert failed and any(step in name and names in msg and host in (None, h)
                          for name, h, msg in failed), failed
    assert not report["outcome"]["engines_touched"]
    assert engine_pids(clab["lab"]) == pids
    assert complete(clab["lab"])


def test_b_a_bad_engine_is_refused_before_any_engine_stops(clab, tmp_path):
    from ascendctl.engine.archive import image_config, write_docker_archive, write_layer_tar

    lab = clab["lab"]
    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/etc/tiny.txt").write_text("hello\n")
    layer = write_layer_tar(tmp_path / "root", tmp_path / "layer.tar")
    good = tmp_path / "tiny.tar"
    write_docker_archive(good, [layer], image_config([layer.diff_id], labels={"t": "h7"}),
                         ["localhost/h7/tiny:bad"])
    data = good.read_bytes()
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(data[:len(data) // 2])      # the tar pads its end with zeros
    _refused(clab, write_inventory(clab, "truncated", archive=str(truncated),
                                   image="localhost/h7/tiny:bad"),
             step="every check passes", names="engine.image: engine.archive unreadable")
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(data.replace(b"hello\n", b"HELLO\n", 1))
    _refused(clab, write_inventory(clab, "corrupt", archive=str(corrupt),
                                   image="localhost/h7/tiny:bad"),
             step="relay and load", names="node0: load failed")
    # an image that only node0 holds, no archive to load it from
    ssh(lab, "node0", f"podman tag {clab['image_v1'][7:]} localhost/h7/only-node0:x")
    _refused(clab, write_inventory(clab, "missing", archive=None,
                                   image="localhost/h7/only-node0:x"),
             step="every check passes",
             names="node1 engine.image: localhost/h7/only-node0:x is not on this node")
    # another container given the NPUs: the preflight gate refuses, naming it
    ssh(lab, "node1", "podman run -d --rm --log-driver=none --name squatter --device "
                      "/dev/davinci3 --entrypoint /bin/sleep localhost/ascendctl-lab/vllm-cpu:v1 600")
    try:
        _refused(clab, clab["v1"], step="every check passes",
                 names="node1 engine.npu_holders: container squatter")
        pre = ascendctl("preflight", "-i", str(clab["v1"]), "--only", "engine.npu_holders")
        assert pre.returncode == 1
        assert "container squatter (localhost/ascendctl-lab/vllm-cpu:v1) is given davinci3" \
            in pre.stdout
    finally:
        ssh(lab, "node1", "podman rm -f squatter", check=False)


def test_c_preflight_judges_the_images_cann_against_the_driver(clab):
    lab, inv = clab["lab"], clab["v1"]
    ok = ascendctl("preflight", "-i", str(inv), "--only", "engine", "--json")
    assert ok.returncode == 0, ok.stdout[-2000:]
    results = {(r["node"], r["id"]): r for r in json.loads(ok.stdout)["results"]}
    assert results[("node1", "engine.image_cann")]["message"] == \
        "the image's CANN 8.5.1 accepts driver 25.3.rc1 (V100R001C23)"
    assert results[("node0", "engine.npu_holders")]["status"] == "pass"   # our own engine runs
    lab.fault("node1", "driver-old")
    try:
        bad = ascendctl("preflight", "-i", str(inv), "--only", "engine.image_cann", "--json")
        assert bad.returncode == 1
        (failed,) = [r for r in json.loads(bad.stdout)["results"] if r["status"] == "fail"]
        assert failed["node"] == "node1"
        assert failed["message"].startswith("the image's CANN 8.5.1 does not list driver "
                                            "24.1.rc2 (V100R001C17)")
        # an image no node holds yet: its CANN is read from the archive on this machine
        from ascendctl_lab.engine_image import build_engine_image

        v2 = build_engine_image("v2", progress=lambda _: None)
        clab["v2"] = write_inventory(clab, "v2", archive=str(v2.archive), image=v2.image)
        clab["image_v2"] = v2.image_id
        pre = ascendctl("preflight", "-i", str(clab["v2"]), "--only", "engine", "--json")
        found = {(r["node"], r["id"]): r for r in json.loads(pre.stdout)["results"]}
        assert found[("node1", "engine.image_cann")]["message"].startswith(
            "the archive's CANN 8.5.1 does not list driver 24.1.rc2")
        assert found[("node0", "engine.image_cann")]["status"] == "pass"
        assert found[("node0", "engine.image")]["message"].endswith(
            "loaded from the archive by deploy")
    finally:
        lab.heal("node1")


def test_d_engine_upgrade_then_rollback_to_the_old_image(clab):
    lab = clab["lab"]
    report = deployed(ascendctl("deploy", "-i", str(clab["v2"]), "--yes", "--json"))
    release_v2 = report["outcome"]["release_id"]
    # v2 has v1's layers (only its config differs): each node loads it from the config,
    # and not one byte of the 4 GB archive travels
    (present,) = tasks(report, "engine_present")
    assert set(present["hosts"]) == {"node0", "node1"}
    for result in present["hosts"].values():
        assert result["status"] == "changed" and "nothing relayed" in result.get("msg", ""), \
            result
    assert release_v2 != clab["release_v1"] and report["outcome"]["previous"] == clab["release_v1"]
    for node in ("node0", "node1"):
        (box,) = containers(lab, node)
        assert "sha256:" + box["ImageID"] == clab["image_v2"]
    assert complete(lab)
    shown = json.loads(ascendctl("history", "-i", str(clab["v2"]), "--json").stdout)
    engines = {r["id"]: r["summary"]["engine"] for r in shown["releases"]}
    assert engines[clab["release_v1"]]["id"] == clab["image_v1"]
    assert engines[release_v2]["id"] == clab["image_v2"]
    table = ascendctl("history", "-i", str(clab["v2"]))
    assert f"img-{clab['image_v1'][7:19]}" in table.stdout
    assert f"img-{clab['image_v2'][7:19]}" in table.stdout

    back = deployed(ascendctl("rollback", "-i", str(clab["v2"]), "--yes", "--json"))
    assert back["outcome"]["release_id"] == clab["release_v1"]
    for node in ("node0", "node1"):
        (box,) = containers(lab, node)
        assert "sha256:" + box["ImageID"] == clab["image_v1"]
        assert ssh(lab, node, "readlink /var/lib/ascendctl/current").strip().endswith(
            clab["release_v1"])
    assert complete(lab)
    # a stop leaves no container behind and counts as a clean stop (the launcher's 143).
    # The follower is stopped first, its head still serving; the head then may already
    # have ended by itself when its stop comes (its pipeline peer left: seen on the lab),
    # so only the follower's stop is judged clean; neither leaves a container.
    results = {}
    for node in ("node1", "node0"):
        ssh(lab, node, "systemctl stop ascendctl-engine")
        assert containers(lab, node) == []
        results[node] = ssh(lab, node, "systemctl show -p Result --value "
                                       "ascendctl-engine").strip()
    assert results["node1"] == "success", results
    assert results["node0"] in ("success", "exit-code"), results
