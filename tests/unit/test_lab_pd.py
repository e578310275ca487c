"""`lab up --pd`: the lab's PD inventory (one prefill and one decode node per unit, vLLM's
storage connector over the directory every node shares), the PD router in the node image,
and the arguments refused before anything is built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.inventory.pd import launch_views, role_hosts
from ascendctl.load import load_inventory
from ascendctl_lab import image, inventory
from ascendctl_lab import node as lab_node
from ascendctl_lab.lab import CONTAINER_STORAGE, SHARED_DIR, Lab, LabNode


def lab_nodes(count: int) -> list[dict]:
    return [{"name": f"node{i}", "mgmt_ip": f"198.18.1.{11 + i}", "rank": i, "nic": "host0",
             "device_ips": [f"198.19.1.{11 + 8 * i + p}" for p in range(8)]}
            for i in range(count)]


def build(tmp_path: Path, count: int, **kwargs) -> dict:
    for name in ("id", "kh", "api-key"):
        (tmp_path / name).write_text("")
    return inventory.build(name="t", chip="910B3", npus=8, roce_mtu=4200,
                           netmask="255.255.255.0", key=tmp_path / "id",
                           known_hosts=tmp_path / "kh", nodes=lab_nodes(count),
                           roce_gateway="198.19.1.1", model_dir=tmp_path / "model",
                           versions={"vllm": image.VLLM_VERSION},
                           engine=f"{image.VLLM_DIR}/bin/vllm",
                           api_key_file=tmp_path / "api-key", **kwargs)


def load_built(tmp_path: Path, count: int):
    path = tmp_path / "lab.yaml"
    inventory.write(path, build(tmp_path, count, pd=True))
    return load_inventory(path)


def test_two_nodes_are_one_pd_unit_over_the_shared_directory(tmp_path):
    inv = load_built(tmp_path, 2)
    assert inv.pd is not None
    assert inv.pd.connector == "ExampleConnector"
    assert inv.pd.shared_storage_path == f"{SHARED_DIR}/kv"
    assert (inv.pd.router.port, inv.pd.router.executable) == (8100, image.ROUTER_EXECUTABLE)
    assert [(g.name, g.hosts) for g in inv.serving_groups] == [("unit0", ("node0", "node1"))]
    assert [h.name for h in role_hosts(inv, "unit0", "prefill")] == ["node0"]
    assert [h.name for h in role_hosts(inv, "unit0", "decode")] == ["node1"]
    assert inv.serving.mode == "dp" and inv.serving.pipeline_parallel_size == 1
    assert inv.serving.tensor_parallel_size == 1
    assert inv.serving.enable_prefix_caching is None          # vLLM's default
    assert inv.serving.proxy.enabled and inv.serving.proxy.port == 8080
    assert inv.gateway is not None and inv.gateway.name == "node0"
    assert inv.serving.api_key is not None
    assert inv.slo.quality is not None and inv.slo.quality.agree_with_previous
    # each side is one node: the head (rank 0) of its own DP group
    views = launch_views(inv)
    assert [(v.serving_groups[0].name, [(h.name, h.rank) for h in v.hosts]) for v in views] == \
        [("unit0", [("node0", 0)]), ("unit0", [("node1", 0)])]
    assert {(v.serving.data_parallel_size, v.serving.tensor_parallel_size) for v in views} == \
        {(1, 1)}
    # each engine keeps a CPU of its own, as in every lab inventory
    assert [h.env["VLLM_CPU_OMP_THREADS_BIND"] for h in inv.hosts] == \
        [str(i % (os.cpu_count() or 1)) for i in range(2)]


def test_four_nodes_are_two_units_each_a_prefill_and_a_decode_node(tmp_path):
    inv = load_built(tmp_path, 4)
    assert [(g.name, g.hosts) for g in inv.serving_groups] == \
        [("unit0", ("node0", "node1")), ("unit1", ("node2", "node3"))]
    assert [(h.name, h.pd_role) for h in inv.hosts] == \
        [("node0", "prefill"), ("node1", "decode"), ("node2", "prefill"), ("node3", "decode")]
    assert [h.name for h in inv.select("prefill")] == ["node0", "node2"]
    assert [h.name for h in inv.select("decode")] == ["node1", "node3"]
    assert len(launch_views(inv)) == 4


def test_without_pd_the_inventory_is_as_before(tmp_path):
    data = build(tmp_path, 2)
    assert "pd" not in data["all"]["vars"]
    assert data["all"]["vars"]["serving"]["mode"] == "mp"
    assert data["all"]["vars"]["serving"]["pipeline_parallel_size"] == 2
    assert set(data["all"]["children"]) == {"nodes"}


@pytest.mark.parametrize("count, replicas", [(3, 1), (0, 1), (4, 2)])
def test_the_builder_refuses_what_makes_no_pairs(tmp_path, count, replicas):
    with pytest.raises(ValueError):
        build(tmp_path, count, pd=True, replicas=replicas)


@pytest.fixture()
def lab_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_LAB_ROOT", str(tmp_path / "lab-root"))
    return tmp_path / "lab-root"


@pytest.mark.parametrize("kwargs, field, words", [
    ({"nodes": 3, "pd": True}, "--nodes", "even number of nodes"),
    ({"nodes": 1, "pd": True}, "--nodes", "even number of nodes"),
    ({"nodes": 4, "pd": True, "replicas": 2}, "--pd", "drop --replicas"),
])
def test_lab_up_refuses_pd_arguments_before_anything_is_built(lab_root, kwargs, field, words):
    with pytest.raises(InputError) as caught:
        Lab("pdtest").up(**kwargs)
    assert caught.value.field == field and words in str(caught.value)
    assert not lab_root.exists()


def test_the_cli_names_the_refused_option(cli_runner, lab_root, tmp_path):
    env = {**os.environ, "ASCENDCTL_LAB_ROOT": str(lab_root)}
    result = cli_runner.run(["lab", "up", "--pd", "--replicas", "2", "--nodes", "4",
                             "--name", "pdtest"], cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "--pd: " in result.stderr and "--replicas" in result.stderr
    result = cli_runner.run(["lab", "up", "--pd", "--nodes", "3", "--name", "pdtest"],
                            cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "--nodes: " in result.stderr
    assert not lab_root.exists()


def test_the_node_services_layer_installs_the_pinned_router():
    recipe = image.PodmanRecipe(lowers=("base", "vllm"))
    script = recipe.script()
    assert image.ROUTER_VERSION == "0.1.17"
    assert "python3 -m venv /opt/vllm-router\n" in script
    assert ("/opt/vllm-router/bin/pip install --no-cache-dir --progress-bar off "
            "'vllm-router==0.1.17'") in script
    assert f"ln -sf /opt/vllm-router/bin/vllm-router {image.ROUTER_EXECUTABLE}\n" in script
    assert "vllm-router --help >/dev/null\n" in script
    # the build host's CA reaches pip as it does for the vLLM layer
    assert "[ -s /tmp/lab-build-ca.crt ] && export PIP_CERT=/tmp/lab-build-ca.crt" in script
    # the router's pin is part of the layer's digest: another version is another layer
    other = image.PodmanRecipe(lowers=("base", "vllm"), router_version="0.1.16")
    assert other.digest() != recipe.digest()
    assert "'vllm-router==0.1.16'" in other.script()


def test_every_node_binds_the_shared_directory(lab_root, tmp_path):
    lab = Lab("pdtest")
    upper = lab.state_dir / "nodes" / "node0" / "upper"
    node = LabNode(name="node0", rank=0, mgmt_ip="198.18.1.11", device_ips=[],
                   machine="ascendctl-pdtest-node0", netns="ascendctl-pdtest-node0",
                   upper=upper)
    images = tmp_path / "images"
    with_podman = [images / "base-1" / "rootfs", images / "vllm-2" / "layer",
                   images / "podman-3" / "layer"]
    binds = lab._binds(node, with_podman)
    assert binds == ((upper.parent / "containers", CONTAINER_STORAGE),
                     (lab.shared_dir, SHARED_DIR))
    assert lab.shared_dir == lab.state_dir / "shared" and lab.shared_dir.is_dir()
    assert lab.shared_dir.stat().st_mode & 0o777 == 0o755
    argv = lab_node.nspawn_argv(node.machine, node.name, with_podman, upper, binds)
    assert f"--bind={lab.shared_dir}:{SHARED_DIR}" in argv
    # a base-only image (--no-vllm) has no podman storage, but the shared directory
    assert lab._binds(node, with_podman[:1]) == ((lab.shared_dir, SHARED_DIR),)
