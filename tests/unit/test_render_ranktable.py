"""hccl.json: valid against its version's schema, all strings, device IPs from the inventory."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from ascendctl.errors import InputError
from ascendctl.paths import templates_dir
from ascendctl.render import render_release, write_atomic
from ascendctl.render.ranktable import build_rank_table
from tests.unit.test_plan_inventories import make_inventory, set_nodes

FIXTURE_V10 = {  # the shape hccl_tools.py writes (tests/fixtures/hccl_tools_py_mindspore_excerpt.txt)
    "version": "1.0", "server_count": "1",
    "server_list": [{"server_id": "10.0.0.1", "device": [
        {"device_id": "0", "device_ip": "192.168.100.101", "rank_id": "0"}],
        "host_nic_ip": "reserve"}],
    "status": "completed",
}


def schema(version: str) -> dict:
    return json.loads((templates_dir() / "hccl" / f"schema-{version}.json").read_text())


def strings_only(value) -> bool:
    if isinstance(value, dict):
        return all(strings_only(v) for v in value.values())
    if isinstance(value, list):
        return all(strings_only(v) for v in value)
    return isinstance(value, str)


def test_schema_accepts_the_hccl_tools_shape_and_rejects_numbers():
    jsonschema.validate(FIXTURE_V10, schema("1.0"))
    bad = json.loads(json.dumps(FIXTURE_V10))
    bad["server_list"][0]["device"][0]["rank_id"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("1.0"))


def test_a2_rank_table_is_v10_with_the_inventory_device_ips(tmp_path):
    inv = make_inventory(tmp_path)
    rendered = render_release(inv, release_id="r1")
    tables = {node: next(f for f in files if f.path == "hccl.json").content
              for node, files in rendered.items()}
    assert len(set(tables.values())) == 1           # the same table on every node
    table = json.loads(tables["node0"])
    jsonschema.validate(table, schema("1.0"))
    assert strings_only(table) and table["status"] == "completed"
    assert table["server_count"] == "2"
    for host, server in zip(inv.hosts, table["server_list"]):
        assert server["server_id"] == host.ip
        assert [d["device_ip"] for d in server["device"]] == list(host.device_ips)
        assert [d["rank_id"] for d in server["device"]] == \
            [str(host.rank * 8 + i) for i in range(8)]


def test_a3_rank_table_is_v12_with_super_pods(tmp_path):
    def a3(data):
        data["all"]["vars"]["cluster"].update(chip="Ascend910_93", npus_per_node=16)
        set_nodes(data, 2, npus=16)
        for rank, host in enumerate(data["all"]["children"]["ascend"]["hosts"].values()):
            host["super_pod_id"] = rank // 2
            host["super_device_ids"] = [37748736 + rank * 16 + i for i in range(16)]
        data["all"]["vars"]["serving"].update(tensor_parallel_size=16)

    inv = make_inventory(tmp_path, a3)
    table = build_rank_table(inv)
    jsonschema.validate(table, schema("1.2"))
    assert table["version"] == "1.2" and strings_only(table)
    assert table["super_pod_list"] == [{"super_pod_id": "0", "server_list": [
        {"server_id": "198.18.100.10"}, {"server_id": "198.18.100.11"}]}]
    assert table["server_list"][1]["device"][3]["super_device_id"] == str(37748736 + 19)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(table, schema("1.0"))


def test_discovered_device_ips_fill_in_and_missing_ones_are_an_input_error(tmp_path):
    def no_ips(data):
        for host in data["all"]["children"]["ascend"]["hosts"].values():
            del host["device_ips"]
    inv = make_inventory(tmp_path, no_ips)
    with pytest.raises(InputError, match="device_ips"):
        build_rank_table(inv)
    found = {h.name: [f"198.19.{200 + h.rank}.{i}" for i in range(8)] for h in inv.hosts}
    table = build_rank_table(inv, device_ips=found)
    assert table["server_list"][1]["device"][7]["device_ip"] == "198.19.201.7"


def test_atomic_write_leaves_no_temporary_and_applies_the_mode(tmp_path):
    target = tmp_path / "hccl.json"
    target.write_text("old")
    write_atomic(target, b'{"status": "completed"}\n', 0o600)
    assert target.read_bytes() == b'{"status": "completed"}\n'
    assert os.stat(target).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["hccl.json"]
