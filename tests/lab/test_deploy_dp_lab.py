"""Data parallel with a headless follower (the vllm-ascend recipe's launch mode) deploys
and serves on the lab's real vLLM CPU build: DP2, one engine per node, the follower with
`--headless --data-parallel-start-rank 1` reaching the head's data-parallel RPC port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab():
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("dp")).up(nodes=2)
    yield lab
    lab.down()


def test_data_parallel_with_headless_follower_serves(lab, tmp_path):
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    data["all"]["vars"]["serving"].update({
        "mode": "dp", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
        "data_parallel_size": 2, "data_parallel_size_local": 1, "api_server_count": 1,
        "data_parallel_rpc_port": 13389})
    inv = tmp_path / "dp.yaml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    result = subprocess.run([sys.executable, "-m", "ascendctl", "deploy", "-i", str(inv),
                             "--yes", "--json"], capture_output=True, text=True, timeout=1200,
                            stdin=subprocess.DEVNULL, env={**os.environ, "ASCENDCTL_PLAIN": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads(result.stdout)["outcome"]["completion"]

    follower = json.loads(lab.exec("node1", ["cat", "/var/lib/ascendctl/current/engine.json"])
                          .stdout)["argv"]
    assert "--headless" in follower
    assert follower[follower.index("--data-parallel-start-rank") + 1] == "1"
    assert follower[follower.index("--data-parallel-address") + 1] == lab.nodes[0].mgmt_ip
    journal = lab.exec("node1", ["journalctl", "-u", "ascendctl-engine", "-o", "cat",
                                 "--no-pager"]).stdout
    assert "EngineCore_DP1" in journal          # data-parallel rank 1 runs on the follower
    body = json.dumps({"model": "tiny", "prompt": "Hi", "max_tokens": 4, "temperature": 0})
    answer = lab.exec("node1", ["curl", "-s", "--max-time", "120", "-H",
                                "Content-Type: application/json", "-d", body,
                                f"http://{lab.nodes[0].mgmt_ip}:8000/v1/completions"]).stdout
    assert json.loads(answer)["choices"][0]["text"]
