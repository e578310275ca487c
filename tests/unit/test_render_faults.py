"""faults.json as the controller renders it (ascendctl/render/faults.py): the node's
loader reads it, the site's file is merged over the defaults, and a bad site file is bad
input naming its lines before anything reaches a node."""

from __future__ import annotations

import json

import pytest

from ascendctl.errors import InputError
from ascendctl.render.release import render_release
from ascendctl_runtime import layout
from ascendctl_runtime.contract import FaultsConfig
from ascendctl_runtime.faults.policy import table_from_dict
from tests.unit.test_plan_inventories import make_inventory


def serving(data):
    return data["all"]["vars"]["serving"]


def faults_of(inv) -> dict[str, FaultsConfig]:
    return {node: FaultsConfig.from_json(next(f.content for f in files
                                              if f.path == layout.FAULTS_CONFIG))
            for node, files in render_release(inv, release_id="r-x").items()}


def test_every_node_gets_its_monitor_and_the_head_reads_the_engine(tmp_path):
    configs = faults_of(make_inventory(tmp_path))
    assert sorted(configs) == ["node0", "node1"]
    head, follower = configs["node0"], configs["node1"]
    assert head.engine_metrics_url == "http://127.0.0.1:8000/metrics"
    assert follower.engine_metrics_url is None
    assert head.npus == head.ports == list(range(8)) and head.serving_groups == 1
    table = table_from_dict(head.policy, "faults.json")
    assert [r.action for r in table.rules_for("ecc.multi_bit")] == ["drain", "isolate"]


def test_a_site_file_replaces_the_defaults_for_what_it_names(tmp_path):
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"format": "ascendctl-faults/1", "restart": [
        {"codes": ["engine.stall"], "persistence": {"readings": 2}}]}))

    def edit(data):
        serving(data).setdefault("health", {}).update(fault_policy="site.json",
                                                      fault_interval_s=5)

    config = faults_of(make_inventory(tmp_path, edit))["node1"]
    rules = table_from_dict(config.policy, "faults.json").rules_for("engine.stall")
    assert [(r.action, r.persistence.readings) for r in rules] == [("restart", 2)]
    assert config.interval_s == 5.0


def test_a_bad_site_file_is_bad_input_naming_its_line(tmp_path):
    (tmp_path / "site.json").write_text('{"format": "ascendctl-faults/1",\n'
                                        ' "drain": [{"codes": ["xyz"]}]}\n')

    def edit(data):
        serving(data).setdefault("health", {})["fault_policy"] = "site.json"

    with pytest.raises(InputError) as caught:
        faults_of(make_inventory(tmp_path, edit))
    text = str(caught.value)
    assert "serving.health.fault_policy" in text and ":2: drain[0].codes[0]: 'xyz'" in text
    (tmp_path / "site.json").unlink()
    (tmp_path / "site.json").mkdir()
    with pytest.raises(InputError, match="directory"):
        faults_of(make_inventory(tmp_path, edit))
