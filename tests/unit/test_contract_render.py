"""Every config the renderer writes is read back by the node's own class (the contract's),
for every launch mode: the same values, nothing left over, nothing the node refuses."""

from __future__ import annotations

import json

import pytest

from ascendctl.render import render_release
from ascendctl_runtime import layout
from ascendctl_runtime.contract import RELEASE_CONFIGS, LaunchConfig, SupervisorConfig
from tests.unit.test_plan_inventories import make_inventory, serving


def ray(data):
    serving(data).update(mode="ray", data_parallel_size=1, data_parallel_size_local=None,
                         api_server_count=None, tensor_parallel_size=8, pipeline_parallel_size=2)


def mp(data):
    serving(data).update(mode="mp", data_parallel_size=1, data_parallel_size_local=None,
                         api_server_count=None, tensor_parallel_size=8, pipeline_parallel_size=2)


def no_secrets(data):
    serving(data).pop("api_key", None)


@pytest.mark.parametrize("edit", [None, mp, ray, no_secrets], ids=["dp", "mp", "ray", "no-key"])
def test_each_rendered_config_is_read_by_the_nodes_class(tmp_path, edit):
    inv = make_inventory(tmp_path, edit)
    seen = set()
    for node, files in render_release(inv, release_id="r-x", secrets={"api_key": "k"}).items():
        for rendered in files:
            cls = RELEASE_CONFIGS.get(rendered.path)
            if cls is None:
                continue
            path = tmp_path / f"{node}-{rendered.path}"
            path.write_bytes(rendered.content)
            config = cls.load(str(path))
            # the node reads every value the renderer wrote (5 == 5.0 for a float field)
            assert json.loads(config.to_json()) == json.loads(rendered.content), rendered.path
            seen.add(rendered.path)
    expected = {layout.ENGINE_CONFIG, layout.WATCHDOG_CONFIG, layout.AGENT_CONFIG,
                layout.SUPERVISOR_CONFIG, layout.FAULTS_CONFIG}
    assert seen == (expected | {layout.RAY_CONFIG} if edit is ray else expected)


def test_the_launch_and_supervisor_configs_say_what_the_units_run(tmp_path):
    inv = make_inventory(tmp_path, ray)
    files = {node: {f.path: f for f in node_files}
             for node, node_files in render_release(inv, release_id="r-x").items()}
    head = LaunchConfig.from_json(files["node0"][layout.RAY_CONFIG].content)
    assert (head.kind, head.rank, head.argv[:2]) == ("ray", 0, [head.argv[0], "start"])
    supervisor = SupervisorConfig.from_json(files["node0"][layout.SUPERVISOR_CONFIG].content)
    assert supervisor.steps == [("node0", layout.RAY_UNIT), ("node0", layout.ENGINE_UNIT),
                                ("node1", layout.RAY_UNIT)]
    for by_path in files.values():
        for unit in by_path:
            if unit.startswith(layout.UNITS_DIR + "/"):
                assert unit.removeprefix(layout.UNITS_DIR + "/") in layout.ALL_UNITS
    engine_unit = files["node0"][layout.unit_file(layout.ENGINE_UNIT)].content.decode()
    assert f"Requires={layout.RAY_UNIT}\n" in engine_unit
    assert f"/releases/r-x/{layout.ENGINE_CONFIG}" in engine_unit
