"""Expectations, gather parameters and the ping plan, built from inventories."""

from __future__ import annotations

import itertools

import pytest

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.preflight.expectations import (
    FULL_STACK, OwnHolders, PreflightOptions, build_expectations, required_packages,
)
from ascendctl.preflight.model_size import GIB, model_source_bytes
from ascendctl.preflight.plan import gather_params, ping_peers, second_round_peers

from test_preflight_support import no, write_inventory


def test_cluster_values_reach_the_expectations(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, model_files={"a.safetensors": 3000,
                                                                "config.json": 96,
                                                                ".cache/x": 10_000}))
    exp = build_expectations(inv)
    assert (exp.chip, exp.npus_per_node, exp.chips_per_npu) == ("910B3", 8, 1)
    assert (exp.roce_mtu, exp.roce_tls, exp.roce_netmask, exp.roce_gateway) == (9000, False, "255.255.255.0", None)
    assert exp.path_mtu == 9000
    assert exp.versions.driver == "25.3.rc1" and exp.versions.vllm_ascend == "0.18.0"
    assert exp.versions.firmware is None
    # dot-entries are not part of a model (as in a weights manifest); 1 GiB headroom
    assert exp.model_path == "/data/ascendctl"
    assert exp.model_bytes == 3096 + GIB
    assert exp.clock_skew_tolerance_s == 1.0
    assert exp.head == "node0" and exp.head_address == "198.18.0.11"
    assert exp.launch_ports == (13389,)
    assert exp.dp_size == 2 and exp.hccl_connect_timeout_s == 1200
    assert exp.rank_start_budget_s == 60     # (nodes - 1) x the deploy's per-rank wait
    n0, n1 = exp.node("node0"), exp.node("node1")
    assert n0.device_ips == no.device_ips(0) and n1.device_ips == no.device_ips(1)
    assert (n0.socket_ifname, n0.socket_ip) == ("enp189s0f0", "198.18.0.11")
    assert n0.ports_free == (9101, 8000, 13389) and n1.ports_free == (9101,)
    assert (n0.dp_start_rank, n0.dp_size_local, n0.headless) == (0, 1, False)
    assert (n1.dp_start_rank, n1.dp_size_local, n1.headless) == (1, 1, True)


def test_options_and_model_bytes_override(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    exp = build_expectations(inv, options=PreflightOptions(clock_tolerance_s=0.25, disk_headroom_gib=0),
                             model_bytes=5 * GIB)
    assert exp.clock_skew_tolerance_s == 0.25
    assert exp.model_bytes == 5 * GIB


def test_model_path_means_no_copy_but_storage_is_still_judged(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, model_path="/mnt/nfs/models/tiny"))
    exp = build_expectations(inv)
    assert exp.model_path == "/mnt/nfs/models/tiny" and exp.model_bytes is None
    assert model_source_bytes(inv) is None


def test_missing_model_source_is_bad_input(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    import shutil

    shutil.rmtree(tmp_path / "model")
    with pytest.raises(InputError) as err:
        build_expectations(inv)
    assert err.value.exit_code == 2 and "model.source" in str(err.value)


@pytest.mark.parametrize("versions,expected", [
    ("{driver: 25.3.rc1, vllm_ascend: 0.18.0}", FULL_STACK),
    ("{}", FULL_STACK),                                            # nothing pinned: the NPU stack
    ("{driver: 25.3.rc1, cann: 8.5.1, python: '3.11', vllm: 0.32.0}", ("vllm",)),   # the lab's
    ("{vllm: 0.32.0, torch: 2.13.0}", ("vllm", "torch")),
])
def test_required_packages_follow_the_pins(tmp_path, versions, expected):
    inv = load_inventory(write_inventory(tmp_path, versions=versions))
    assert required_packages(inv) == expected


@pytest.mark.parametrize("serving,head_ports,launch", [
    ("{mode: mp, port: 8001, pipeline_parallel_size: 2, master_port: 29600}", (9101, 8001, 29600), (29600,)),
    ("{mode: ray, tensor_parallel_size: 2, ray_port: 6380, proxy: {enabled: true, port: 8080}}",
     (9101, 8000, 6380, 8080), (6380,)),
    ("{mode: dp, data_parallel_size: 2, data_parallel_rpc_port: 13390}", (9101, 8000, 13390), (13390,)),
])
def test_ports_per_launch_mode(tmp_path, serving, head_ports, launch):
    exp = build_expectations(load_inventory(write_inventory(tmp_path, serving=serving)))
    assert exp.node("node0").ports_free == head_ports
    assert exp.node("node1").ports_free == (9101,)
    assert exp.launch_ports == launch


def test_single_node_has_no_launch_ports(tmp_path):
    exp = build_expectations(load_inventory(write_inventory(
        tmp_path, nodes=1, serving="{mode: mp, tensor_parallel_size: 8}")))
    assert exp.launch_ports == () and exp.rank_start_budget_s is None
    assert exp.node("node0").ports_free == (9101, 8000)


def test_socket_nic_and_address_overrides_from_env(tmp_path):
    inv = load_inventory(write_inventory(
        tmp_path, hosts_extra={1: "env: {HCCL_SOCKET_IFNAME: bond0, HCCL_IF_IP: 198.18.1.12}\n"}))
    n1 = build_expectations(inv).node("node1")
    assert (n1.socket_ifname, n1.socket_ip) == ("bond0", "198.18.1.12")


def test_own_units_exempt_ports_and_pids(tmp_path):
    inv = load_inventory(write_inventory(tmp_path))
    own = {"node0": OwnHolders(npu_pids=frozenset({4242}), ports={8000: "ascendctl-engine.service (pid 4242)"})}
    exp = build_expectations(inv, own=own)
    assert exp.node("node0").ports_free == (9101, 13389)
    assert exp.allowed_npu_pids == frozenset({4242})


def test_a3_counts_cards_and_dies(tmp_path):
    path = write_inventory(tmp_path)
    text = path.read_text().replace("chip: 910B3", "chip: Ascend910_93").replace("npus_per_node: 8", "npus_per_node: 16")
    ips = {i: [f"198.19.{i}.{d + 10}" for d in range(16)] for i in range(2)}   # .0: the network
    for i in range(2):
        text = text.replace("[" + ", ".join(no.device_ips(i).values()) + "]",
                            "[" + ", ".join(ips[i]) + f"]\n          super_pod_id: 0\n"
                            f"          super_device_ids: [{', '.join(str(d + 16 * i) for d in range(16))}]")
    path.write_text(text)
    inv = load_inventory(path)
    exp = build_expectations(inv)
    assert (exp.chip, exp.npus_per_node, exp.chips_per_npu, exp.roce_ports) == ("910_93", 8, 2, 16)
    params = gather_params(inv, inv.host("node0"), play_hosts=["node0", "node1"])
    assert (params.npu_count, params.chips_per_npu) == (8, 2)
    assert sorted(params.ping_targets) == list(range(16))


@pytest.mark.parametrize("n", range(1, 10))
def test_pairs_cover_every_pair_and_every_node_pings(n):
    nodes = [f"n{i}" for i in range(n)]
    plan = {x: ping_peers(nodes, x, "pairs") for x in nodes}
    covered = {frozenset((a, b)) for a, peers in plan.items() for b in peers}
    assert covered == {frozenset(p) for p in itertools.combinations(nodes, 2)}
    for x, peers in plan.items():
        assert x not in peers and len(peers) == len(set(peers)) == n // 2


def test_other_strategies():
    nodes = ["a", "b", "c", "d"]
    assert [ping_peers(nodes, x, "ring") for x in nodes] == [["b"], ["c"], ["d"], ["a"]]
    assert ping_peers(nodes, "b", "all-ports") == ["a", "c", "d"]
    assert ping_peers(nodes, "b", "none") == []
    assert ping_peers(["a"], "a", "pairs") == []


def test_gather_params_for_head_and_follower(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, nodes=3))
    hosts = ["node0", "node1", "node2"]
    head = gather_params(inv, inv.host("node0"), play_hosts=hosts)
    follower = gather_params(inv, inv.host("node1"), play_hosts=hosts)
    assert head.probe_host is None and head.probe_ports == ()
    assert (follower.probe_host, follower.probe_ports) == ("198.18.0.11", (13389,))
    assert head.model_path == "/data/ascendctl" and head.path_mtu == 9000
    assert head.python == "python3"              # serving.engine is `vllm` on PATH
    # pairs on 3 nodes: node0 pings node1's same-index ports
    assert head.ping_targets == {d: (ip,) for d, ip in no.device_ips(1).items()}
    all_ports = gather_params(inv, inv.host("node0"), play_hosts=hosts, pings="all-ports")
    assert all_ports.ping_targets[0] == tuple(no.device_ips(1).values()) + tuple(no.device_ips(2).values())
    # --limit: only the hosts of the run are pinged
    limited = gather_params(inv, inv.host("node0"), play_hosts=["node0", "node2"])
    assert limited.ping_targets == {d: (ip,) for d, ip in no.device_ips(2).items()}


def test_engine_path_gives_the_venv_python(tmp_path):
    inv = load_inventory(write_inventory(tmp_path, extra_serving=", engine: /opt/vllm/bin/vllm"))
    assert gather_params(inv, inv.host("node0"), play_hosts=["node0"]).python == "/opt/vllm/bin/python"


def test_hosts_without_device_ips_are_pinged_in_a_second_round(tmp_path):
    path = write_inventory(tmp_path)
    text = path.read_text().replace("device_ips: [" + ", ".join(no.device_ips(1).values()) + "]\n", "")
    path.write_text(text)
    inv = load_inventory(path)
    assert inv.host("node1").device_ips is None
    hosts = ["node0", "node1"]
    # node0's peer has no inventory IPs: nothing to ping in round one, node1 in round two
    assert gather_params(inv, inv.host("node0"), play_hosts=hosts).ping_targets == {}
    assert second_round_peers(inv, inv.host("node0"), play_hosts=hosts, pings="pairs") == ["node1"]
    # node1 knows node0's IPs from the inventory: round one
    assert gather_params(inv, inv.host("node1"), play_hosts=hosts).ping_targets[3] == (no.device_ips(0)[3],)
    assert second_round_peers(inv, inv.host("node1"), play_hosts=hosts, pings="pairs") == []
