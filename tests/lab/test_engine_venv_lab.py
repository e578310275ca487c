"""The engine as an offline venv (issue 14's acceptance, the venv kind), on the engine
suite's shared lab (`gang`, tests/conftest.py), after test_health_dp_lab.py:

  E  deploy: a venv is built on every node from the lab wheelhouse, every rank runs
     `<root>/engines/venv/<digest>/bin/vllm`, a completion answers; a no-op redeploy
     builds nothing and restarts nothing

The container kind is test_engine_deploy_lab.py (a lab of its own: podman on the nodes).
Leaves the engines stopped for test_weights_pp_vllm.py.

Run under the engine slot: flock /run/lock/ascendctl-engine-slot pytest tests/lab/test_engine_venv_lab.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.lab.health_helpers import ascendctl, completes, inventory, node_sh

pytestmark = pytest.mark.lab
# ... and runs right after that module (tests/conftest.py), on the same lab.
SHARES_DEPLOYMENT_OF = "test_health_dp_lab"

ROOT = "/var/lib/ascendctl"


@pytest.fixture(scope="module")
def vlab(gang):
    from ascendctl_lab.wheelhouse import build_wheelhouse

    path = inventory(gang, "venv")
    data = yaml.safe_load(path.read_text())
    variables = data["all"]["vars"]
    variables["serving"].pop("engine", None)
    variables["engine"] = {"kind": "venv", "command": "vllm",
                           "wheelhouse": str(build_wheelhouse(lambda _line: None))}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    gang["inv"] = path
    return gang


def deployed(result) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return json.loads(result.stdout)


def changed_count(report: dict) -> int:
    return sum(counts["changed"] for counts in report["recap"].values())


def engine_pids(cluster) -> dict[str, int]:
    return {n.name: int(node_sh(cluster, n.name, "systemctl show -p MainPID --value "
                                "ascendctl-engine").strip() or 0)
            for n in cluster["lab"].nodes}


def test_e_a_venv_deploy_serves_from_the_venv(vlab):
    inv: Path = vlab["inv"]
    report = deployed(ascendctl("deploy", "-i", str(inv), "--yes", "--json"))
    (present,) = [t for play in report["plays"] for t in play["tasks"]
                  if t.get("module") == "engine_present"]
    assert all(r["status"] == "changed" for r in present["hosts"].values())
    shown = json.loads(ascendctl("history", "-i", str(inv), "--json").stdout)
    (release,) = [r for r in shown["releases"] if r["id"] == report["outcome"]["release_id"]]
    digest = release["summary"]["engine"]["id"].removeprefix("venv:")
    for node, pid in engine_pids(vlab).items():
        # the launcher's child is the engine: the venv's vllm
        args = node_sh(vlab, node, f"ps -o args= --ppid {pid}")
        assert f"{ROOT}/engines/venv/{digest}/bin/vllm serve" in args, args
    assert completes(vlab, timeout=120)
    pids = engine_pids(vlab)
    again = deployed(ascendctl("deploy", "-i", str(inv), "--yes", "--json"))
    assert changed_count(again) == 0 and engine_pids(vlab) == pids
    for node in ("node1", "node0"):
        node_sh(vlab, node, "systemctl stop ascendctl-engine")
