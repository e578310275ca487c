"""Parsers of the engine node operations on recorded output, and the node-side venv and
prune operations run here (a venv from a one-wheel store, offline)."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

from ascendctl.facts import engine as facts_engine
from ascendctl.engine.formats import (
    parse_container_inspect, parse_device_holders, parse_image_cann, parse_image_id,
    parse_load_output, parse_runtime_version, split_file_blocks, unit_of,
)
from ascendctl_lab.engine_image import cann_files
from ascendctl_lab.sim import state as sim_state
from ascendctl_lab.wheelhouse import metadata_wheel
from ascendctl.transport.nodecall import call_stdin, shipped_with
from ascendctl_runtime import engine_node

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine"


def fixture(name: str) -> str:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def test_runtime_versions():
    podman = parse_runtime_version("podman", fixture("podman_version_4.3.1.json.txt"))
    assert (podman.client, podman.server, podman.usable) == ("4.3.1", "4.3.1", True)
    docker = parse_runtime_version("docker", fixture("docker_version_28.2.2_no_daemon.json.txt"))
    assert docker.client == "28.2.2" and docker.server is None and not docker.usable
    assert not parse_runtime_version("podman", "bash: podman: command not found").usable


def test_image_ids():
    hex_id = "82e6db122dfb6cea50ca617cc01175dba926dc0a58c4c41018014de1850f6ad0"
    assert parse_image_id(0, hex_id + "\n") == "sha256:" + hex_id           # podman
    assert parse_image_id(0, "sha256:" + hex_id + "\n") == "sha256:" + hex_id  # docker
    assert parse_image_id(125, "") is None
    assert parse_image_id(0, "Error: nonsense\n") is None


def test_load_output():
    out = parse_load_output(fixture("podman_load_4.3.1.txt"))
    assert out.loaded == ("localhost/h4base:1",)
    assert out.config_digest == ("sha256:82e6db122dfb6cea50ca617cc01175dba926dc0a58c4c41018"
                                 "014de1850f6ad0")
    assert parse_load_output("Loaded image ID: sha256:abc\n").loaded == ("sha256:abc",)


def test_container_devices_from_inspect():
    (info,) = parse_container_inspect(fixture("podman_inspect_container_4.3.1.json.txt"))
    assert info.name == "t1" and info.running and info.pid == 589
    assert info.image == "localhost/h4base:1"
    assert info.image_id.startswith("sha256:82e6db12")
    assert info.devices == ("/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm",
                            "/dev/hisi_hdc") and info.holds_npus
    assert parse_container_inspect("not json") == []


def test_device_holders_and_their_units():
    v1 = ("12:pids:/system.slice/ascendctl-engine.service\n"
          "1:name=systemd:/system.slice/ascendctl-engine.service\n")
    assert unit_of(v1) == "ascendctl-engine.service"
    assert unit_of("0::/system.slice/docker-0123.scope\n") == "docker-0123.scope"
    holders = parse_device_holders({"holders": [{"pid": 7, "comm": "python3", "cgroup": v1,
                                                 "devices": ["/dev/davinci3"]}]})
    assert holders[0].unit == "ascendctl-engine.service" and holders[0].devices == ("/dev/davinci3",)


def test_image_cann_from_the_files_the_lab_image_carries():
    files = cann_files(dict(sim_state.DEFAULT_TOOLKIT), sim_state.DEFAULT_TOOLKIT_RUNNING)
    stdout = "".join(f"==> {p} <==\n{t}\n" for p, t in sorted(files.items())
                     if p.endswith(("version.cfg", "install.info")))
    cann = parse_image_cann(stdout)
    assert cann.found and cann.version == "8.5.1"
    assert cann.toolkit is not None and cann.toolkit.compatible_inner
    assert cann.version_cfg.cann_version == "8.5.1"
    assert not parse_image_cann("").found
    assert split_file_blocks("==> /a <==\nx=1\n==> /b <==\ny\n") == {"/a": "x=1\n", "/b": "y\n"}


def test_real_version_cfg_capture_parses():
    text = (Path(__file__).resolve().parents[1] / "fixtures" /
            "version_info_files_910B_hosts.txt").read_text()
    block = text.split("# cat /usr/local/Ascend/ascend-toolkit/latest/version.cfg\n", 1)[1]
    block = block.split("\n\n", 1)[0]
    cann = parse_image_cann("==> /usr/local/Ascend/ascend-toolkit/latest/version.cfg <==\n"
                            + block)
    assert cann.version == "8.0.T63"


def test_engine_node_is_shipped_with_its_imports():
    paths = {path for path, _ in shipped_with("engine_node")}
    # the CANN version files are the facts module's, shipped with it (no copy)
    assert {"ascendctl_runtime/engine_node.py", "ascendctl_runtime/nodeutil.py",
            "ascendctl/__init__.py", "ascendctl/facts/__init__.py",
            "ascendctl/facts/engine.py"} <= paths
    assert "ascendctl/facts/gather.py" not in paths
    assert engine_node.CANN_FILES is facts_engine.CANN_FILES
    payload = call_stdin("engine_node", {"op": "venv_state", "kwargs": {}})
    assert b"def venv_create" in payload


def make_store(root: Path, wheel: Path) -> dict[str, str]:
    import hashlib

    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    target = Path(engine_node.store_object(str(root), sha))
    target.parent.mkdir(parents=True)
    target.write_bytes(wheel.read_bytes())
    return {"name": wheel.name, "sha256": sha}


def test_venv_from_the_store_offline_then_prune(tmp_path):
    root = tmp_path / "root"
    wheel = metadata_wheel(tmp_path, "0.32.0")
    entry = make_store(root, wheel)
    digest = "c" * 64
    created = engine_node.venv_create(str(root), digest, sys.executable, [entry])
    assert created["created"] and created["present"], created
    site = Path(created["path"])
    assert list(site.glob("lib/python*/site-packages/vllm-0.32.0+cpu.dist-info/METADATA"))
    again = engine_node.venv_create(str(root), digest, sys.executable, [entry])
    assert again["created"] is False and again["present"]
    assert engine_node.venv_state(str(root), digest)["present"]
    missing = engine_node.venv_create(str(root), "d" * 64, sys.executable,
                                      [{"name": "x-1-py3-none-any.whl", "sha256": "e" * 64}])
    assert not missing["present"] and "not in the store" in missing["failure"]
    kept = engine_node.prune(str(root), keep_images=[], keep_venvs=[digest], check=False)
    assert kept["venvs"] == []
    checked = engine_node.prune(str(root), keep_images=[], keep_venvs=[], check=True)
    assert checked["venvs"] == [digest] and site.is_dir()
    engine_node.prune(str(root), keep_images=[], keep_venvs=[], check=False)
    assert not site.exists()


def test_hostile_node_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        engine_node.image_id("podman", "/usr/bin/podman", "--all")
    with pytest.raises(ValueError):
        engine_node.venv_create(str(tmp_path), "../../etc", sys.executable, [])
    with pytest.raises(ValueError):
        engine_node.image_files("podman", "/bin/true", "img", ["relative/path"])
    with pytest.raises(ValueError):
        engine_node.venv_create(str(tmp_path), "f" * 64, sys.executable,
                                [{"name": "../x.whl", "sha256": "0" * 64}])


def test_only_loaded_images_are_pruned(tmp_path):
    root = tmp_path / "root"
    (root / "engines").mkdir(parents=True)
    registry = {"sha256:" + "1" * 64: {"refs": ["a"]}, "sha256:" + "2" * 64: {"refs": ["b"]}}
    (root / "engines" / "images.json").write_text(json.dumps(registry))
    result = engine_node.prune(str(root), keep_images=["2" * 64], keep_venvs=[], check=True)
    assert result["images"] == ["sha256:" + "1" * 64]
    assert os.path.exists(root / "engines" / "images.json")


def test_an_image_whose_layers_a_node_holds_loads_from_its_config_alone(tmp_path):
    """The OCI archive a podman node loads instead of the archive: the archive's config as
    it is (so the same image ID), a manifest naming every layer by its diff_id and size,
    and no layer blob."""
    from ascendctl.engine.archive import image_config, write_docker_archive, write_layer_tar
    from ascendctl.engine.image_archive import read_archive
    from ascendctl.engine.kinds.container import _config_layout
    from ascendctl.inventory.engine import EngineSpec

    layers = []
    for name, text in (("base", "one\n"), ("top", "two\n" * 100)):
        (tmp_path / name / "etc").mkdir(parents=True)
        (tmp_path / name / "etc" / f"{name}.txt").write_text(text)
        layers.append(write_layer_tar(tmp_path / name, tmp_path / f"{name}.tar"))
    archive = tmp_path / "image.tar"
    write_docker_archive(archive, layers, image_config([l.diff_id for l in layers]),
                         ["localhost/t/layout:1"])
    held = read_archive(archive)
    assert held.layer_sizes == tuple(layer.size for layer in layers)

    assert _config_layout(EngineSpec(kind="container", runtime="docker",
                                     image="localhost/t/layout:1"), held) is None
    layout = _config_layout(EngineSpec(kind="container", runtime="podman",
                                       image="localhost/t/layout:1"), held)
    assert layout is not None
    config = base64.b64decode(layout["config"])
    members = engine_node.layout_members(config, layout["layers"])
    index = json.loads(members["index.json"])
    (entry,) = index["manifests"]
    manifest = json.loads(members[f"blobs/sha256/{entry['digest'][7:]}"])
    assert manifest["config"]["digest"] == held.image_id
    assert members[f"blobs/sha256/{held.image_id[7:]}"] == config
    assert [(l["digest"], l["size"]) for l in manifest["layers"]] == \
        [(l.diff_id, l.size) for l in layers]
    assert all(l["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
               for l in manifest["layers"])
    # only the config and the manifest: no layer travels
    assert sorted(members) == sorted([f"blobs/sha256/{held.image_id[7:]}",
                                      f"blobs/sha256/{entry['digest'][7:]}", "index.json",
                                      "oci-layout"])
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    for bad in ([["sha256:" + "0" * 63, 1]], [["md5:" + "0" * 64, 1]], [[layers[0].diff_id, -1]],
                [[layers[0].diff_id, True]], [[layers[0].diff_id]]):
        with pytest.raises(ValueError):
            engine_node.layout_members(b"{}", bad)
