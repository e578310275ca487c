"""Relay chains and the disk check, from node states (no network)."""

from __future__ import annotations

import pytest
from test_weights_checkpoints import qwen3_names, write_checkpoint

from ascendctl.weights.plan import NodeSpec, build_plan
from ascendctl.weights.push import DiskSpaceError, NodeState, build_chains, check_disk

NODES = [NodeSpec(f"node{i}", i) for i in range(4)]


@pytest.fixture
def plan(tmp_path):
    write_checkpoint(tmp_path, qwen3_names(4), 3, config={"num_hidden_layers": 4})
    return build_plan(tmp_path, NODES, mode="mp", tp=4, pp=1)     # whole directory each


def states_with(plan, held: dict[str, dict[str, int]], free: int = 1 << 40):
    """held[node][path] = bytes the node has (== size: complete)."""
    states = {}
    for node in plan.nodes:
        objects = {}
        for f in node.files:
            have = held.get(node.name, {}).get(f.path, 0)
            complete = have == f.entry.size
            objects[f.entry.sha256] = {"status": "ok" if complete else "absent",
                                       "have": have, "reason": ""}
        states[node.name] = NodeState(node.name, free, "/store", objects)
    return states


def test_fresh_push_is_one_chain_over_every_node_from_the_jump_host(plan):
    chains = build_chains(plan, states_with(plan, {}), {n.name: n.name for n in NODES})
    assert len(chains) == 1
    nodes, records = chains[0]
    assert nodes == ["node0", "node1", "node2", "node3"]
    assert all(r.source is not None and r.offset == 0 for r in records)
    assert {r.sha256 for r in records} == set(plan.objects())


def test_a_holder_serves_and_resume_starts_at_the_smallest_offset(plan):
    sizes = {f.path: f.entry.size for f in plan.nodes[0].files}
    shard = "model-00002-of-00003.safetensors"
    held = {
        "node0": dict(sizes),                                   # node0 has everything
        "node1": {shard: 100},
        "node2": {shard: 40},
    }
    for name in ("node1", "node2", "node3"):
        held.setdefault(name, {})["config.json"] = sizes["config.json"]
    chains = build_chains(plan, states_with(plan, held), {n.name: n.name for n in NODES})
    assert len(chains) == 1
    nodes, records = chains[0]
    assert nodes == ["node0", "node1", "node2", "node3"]        # node0 serves, no jump host
    assert all(r.source is None for r in records)
    by_path = {plan.objects()[r.sha256].path: r for r in records}
    assert "config.json" not in by_path
    assert by_path[shard].offset == 0                           # node3 has none of it
    held["node3"] = {"config.json": sizes["config.json"], shard: 70}
    del held["node0"]
    chains = build_chains(plan, states_with(plan, held), {n.name: n.name for n in NODES})
    records = {plan.objects()[r.sha256].path: r for _, rs in chains for r in rs}
    assert records[shard].offset == 0                           # node0 lacks it entirely
    held["node0"] = {shard: 55}
    chains = build_chains(plan, states_with(plan, held), {n.name: n.name for n in NODES})
    records = {plan.objects()[r.sha256].path: r for _, rs in chains for r in rs}
    assert records[shard].offset == 40                          # min over the targets


def test_disk_check_refuses_with_numbers_naming_the_node(plan):
    states = states_with(plan, {})
    need = sum(f.entry.size for f in plan.nodes[2].files)
    states["node2"].free_bytes = need          # no room for the 1 MiB reserve
    with pytest.raises(DiskSpaceError) as err:
        check_disk(plan, states)
    message = str(err.value)
    assert "nothing was sent" in message and "node2 needs" in message
    assert f"({need} bytes)" in message and "node1" not in message
    states["node2"].free_bytes = need + (2 << 20)
    check_disk(plan, states)
