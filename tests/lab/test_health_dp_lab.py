"""Data-parallel recovery on the real engine, on the engine suite's shared lab (`gang`,
after test_doctor_lab.py left its engines stopped and its faults healed):

  G  data parallel with a headless follower (the vllm-ascend recipe's launch mode) deploys
     and serves: DP2, one engine per node, the follower `--headless
     --data-parallel-start-rank 1` reaching the head's RPC address; kill -9 of the
     follower's engine, then of the head's, is recovered (the real engine's test of
     data-parallel recovery)

Run under the machine's engine slot: flock /run/lock/ascendctl-engine-slot pytest ...
"""

from __future__ import annotations

import json

import pytest

from tests.lab.health_helpers import (
    API_KEY, ENGINE, deploy, kill_and_recover, node_sh, status, wait_for,
)

pytestmark = pytest.mark.lab
# ... and runs right after that module (tests/conftest.py), on the same lab.
SHARES_DEPLOYMENT_OF = "test_doctor_lab"


@pytest.fixture(scope="module")
def cluster(gang):
    return gang


def test_data_parallel_group_serves_and_recovers_a_killed_follower_and_head(cluster):
    report = deploy(cluster, "dp", mode="dp", tensor_parallel_size=1, pipeline_parallel_size=1,
                    data_parallel_size=2, data_parallel_size_local=1, api_server_count=1,
                    data_parallel_rpc_port=13389)
    assert report["outcome"]["completion"]
    # the vllm-ascend recipe's launch mode: the follower is headless, DP rank 1, and
    # reaches the head's data-parallel RPC address
    lab = cluster["lab"]
    follower = json.loads(node_sh(cluster, "node1", "cat /var/lib/ascendctl/current/engine.json"))
    argv = follower["argv"]
    assert "--headless" in argv
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "1"
    assert argv[argv.index("--data-parallel-address") + 1] == lab.nodes[0].mgmt_ip
    journal = node_sh(cluster, "node1", f"journalctl -u {ENGINE} -o cat --no-pager")
    assert "EngineCore_DP1" in journal          # data-parallel rank 1 runs on the follower
    body = json.dumps({"model": "tiny", "prompt": "Hi", "max_tokens": 4, "temperature": 0})
    answer = node_sh(cluster, "node1", "curl -s --max-time 120 -H 'Content-Type: "
                     f"application/json' -H 'Authorization: Bearer {API_KEY}' -d '{body}' "
                     f"http://{lab.nodes[0].mgmt_ip}:8000/v1/completions")
    assert json.loads(answer)["choices"][0]["text"]
    wait_for("healthy", lambda: status(cluster)[0] == 0, guard_s=120)
    kill_and_recover(cluster, "node1", 1, "KILL", "crashed")
    kill_and_recover(cluster, "node0", 0, "KILL", "crashed")
