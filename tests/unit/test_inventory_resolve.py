"""A valid inventory resolves to hosts in rank order with merged variables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.load import load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yaml"

LAYERED = """\
all:
  vars:
    cluster: {name: layered, npus_per_node: 1}
    model: {path: /data/m}
    ssh: {user: ops, port: 2200, connect_timeout: 5}
    serving: {mode: dp, data_parallel_size: 3}
    custom: {site: a}
  children:
    rack1:
      vars:
        ssh: {port: 2201}
        custom: {rack: 1}
      hosts:
        b: {ansible_host: 198.18.7.12, rank: 1, ssh: {connect_timeout: 3}}
        a:
          ansible_host: 198.18.7.11
          rank: 0
          ansible_user: root
          env: {VLLM_CPU_OMP_THREADS_BIND: "0"}
    rack2:
      hosts:
        c: {ansible_host: 198.18.7.13, rank: 2, ip: 198.18.8.13, ansible_port: 22}
    gpu:
      hosts:
        a:
        c:
"""


@pytest.fixture()
def layered(tmp_path: Path):
    path = tmp_path / "inv.yaml"
    path.write_text(LAYERED)
    return load_inventory(path)


def test_example_inventory_is_the_facts_md_reference():
    inv = load_inventory(EXAMPLE)
    assert [h.name for h in inv.hosts] == ["node0", "node1"]
    assert inv.serving.mode == "dp"
    assert (inv.serving.tensor_parallel_size, inv.serving.data_parallel_size) == (8, 2)
    assert inv.serving.enable_expert_parallel
    assert inv.serving.data_parallel_rpc_port == 13389
    assert inv.model.quantization == "w8a8"
    assert inv.cluster.hbm_per_npu_gib == 64
    assert inv.versions.python == "3.11"
    assert len(inv.head.device_ips) == 8


def test_hosts_sorted_by_rank_and_ip_defaults_to_address(layered):
    assert [h.name for h in layered.hosts] == ["a", "b", "c"]
    assert layered.head.name == "a"
    assert layered.host("a").ip == "198.18.7.11"
    assert layered.host("c").ip == "198.18.8.13"


def test_ssh_layers_merge_all_then_group_then_host(layered):
    a, b, c = layered.hosts
    assert (a.ssh.user, a.ssh.port, a.ssh.connect_timeout) == ("root", 2201, 5)
    assert (b.ssh.user, b.ssh.port, b.ssh.connect_timeout) == ("ops", 2201, 3)
    assert (c.ssh.user, c.ssh.port) == ("ops", 22)
    assert b.ssh.uses_sudo and not a.ssh.uses_sudo


def test_custom_vars_and_host_env(layered):
    assert layered.host("a").custom == {"site": "a", "rack": 1}
    assert layered.host("c").custom == {"site": "a"}
    assert layered.host("a").env == {"VLLM_CPU_OMP_THREADS_BIND": "0"}


def test_groups_include_implicit_ones_in_rank_order(layered):
    assert layered.groups["all"] == ("a", "b", "c")
    assert layered.groups["gpu"] == ("a", "c")
    assert layered.groups["head"] == ("a",)
    assert layered.groups["followers"] == ("b", "c")
    assert layered.host("a").groups == ("all", "rack1", "gpu")


@pytest.mark.parametrize("pattern,expected", [
    (None, ["a", "b", "c"]),
    ("all", ["a", "b", "c"]),
    ("rack1", ["a", "b"]),
    ("c", ["c"]),
    ("rack1:rack2", ["a", "b", "c"]),
    ("all:!head", ["b", "c"]),
    ("gpu:&followers", ["c"]),
    ("rack*", ["a", "b", "c"]),
    ("a,b", ["a", "b"]),
])
def test_select_patterns(layered, pattern, expected):
    assert [h.name for h in layered.select(pattern)] == expected


def test_select_unknown_term_is_an_error(layered):
    with pytest.raises(InputError, match="matches no host or group"):
        layered.select("nope")


def test_show_redacts_secret_reference(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_API_KEY", "sk-should-never-print")
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "show", "-i",
                             str(EXAMPLE), "--json"], capture_output=True, text=True,
                            timeout=60, env={**__import__("os").environ})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["serving"]["api_key"] == "<secret from env:ASCENDCTL_API_KEY>"
    assert "sk-should-never-print" not in result.stdout


def test_secret_ref_error_does_not_echo_value(tmp_path: Path):
    path = tmp_path / "inv.yaml"
    path.write_text(LAYERED.replace("data_parallel_size: 3}",
                                    "data_parallel_size: 3, api_key: {env: sk-abc-123}}"))
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    assert "sk-abc-123" not in str(caught.value)
    assert caught.value.field == "all.vars.serving.api_key"
