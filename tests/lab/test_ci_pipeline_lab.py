"""examples/ci/pipeline.sh end to end, the way a CI job on a jump host runs ascendctl:
preflight -> deploy -> status -> bench (tiny workload, the lab's SLOs) -> doctor bundle, no
terminal, the API key and the SSH key and known_hosts from the environment only; every
stage's JSON and JUnit report complete, the API key in none of them nor in the bundle.

On the engine suite's shared lab (`gang`, tests/conftest.py), after test_bench_lab.py: the
inventory is the CI copy of the one deployed there (its API key named by $VLLM_API_KEY, no
SSH paths), the group serving and left serving for test_doctor_lab.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from tests.lab.health_helpers import API_KEY, KEY_ENV, deploy

pytestmark = pytest.mark.lab
# ... and runs right after that module (tests/conftest.py), while its engines are up.
SHARES_DEPLOYMENT_OF = "test_bench_lab"

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "examples" / "ci" / "pipeline.sh"


@pytest.fixture(scope="module")
def cluster(gang):
    if "inv" not in gang:          # run alone: the deployment the chain would have made
        deploy(gang, "mp")
    return gang


def ci_copy(cluster) -> Path:
    """The deployed inventory as a CI job keeps it: the API key from $VLLM_API_KEY, no SSH
    paths (ASCENDCTL_SSH_KEY / ASCENDCTL_KNOWN_HOSTS, as on a real jump host)."""
    data = yaml.safe_load(Path(cluster["inv"]).read_text())
    variables = data["all"]["vars"]
    assert variables["serving"]["api_key"] == {"env": KEY_ENV}
    variables["serving"]["api_key"] = {"env": "VLLM_API_KEY"}
    for key in ("private_key", "known_hosts"):
        variables["ssh"].pop(key, None)
    path = cluster["dir"] / "ci.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_ci_pipeline_runs_every_stage_and_leaks_no_secret(cluster, tmp_path):
    lab = cluster["lab"]
    reports = tmp_path / "reports"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ASCENDCTL_") and key != KEY_ENV}
    env.update(ASCENDCTL=str(Path(sys.executable).with_name("ascendctl")),
               ASCENDCTL_INVENTORY=str(ci_copy(cluster)), REPORTS=str(reports),
               ASCENDCTL_SSH_KEY=str(lab.ssh_key), ASCENDCTL_KNOWN_HOSTS=str(lab.known_hosts),
               VLLM_API_KEY=API_KEY,
               BENCH_ARGS="--input-len 32 --output-len 16 --num-prompts 8 --concurrency 4")
    run = subprocess.run(["bash", str(PIPELINE), "preflight", "deploy", "status", "bench",
                          "doctor"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for stage in ("preflight", "deploy", "status", "bench", "doctor"):
        assert f"== {stage}: exit" in run.stderr and "(ok)" in run.stderr

    for name in ("preflight", "deploy", "bench"):
        xml = JUnitXml.fromfile(str(reports / f"{name}.xml"))
        assert xml.tests > 0 and xml.failures == 0 and xml.errors == 0, name
    status = json.loads((reports / "status.json").read_text())
    assert status["verdict"] == "healthy", status.get("reasons")
    bench = json.loads((reports / "bench.json").read_text())
    assert bench["verdict"]["status"] == "pass", bench["verdict"]
    assert bench["figures"]["completed"] == 8 and bench["figures"]["output_throughput"] > 0
    doctor = json.loads((reports / "doctor.json").read_text())
    assert [n["name"] for n in doctor["nodes"]] == ["node0", "node1"]

    key = API_KEY.encode()
    leaks = [p.name for p in reports.iterdir() if p.is_file() and key in p.read_bytes()]
    with tarfile.open(reports / "doctor.tar.gz") as tar:
        nodes = {m.name.split("/")[1] for m in tar.getmembers() if m.name.count("/") > 1}
        leaks += [m.name for m in tar.getmembers()
                  if m.isfile() and key in tar.extractfile(m).read()]
    assert nodes == {"node0", "node1"}
    assert leaks == []
    assert API_KEY not in run.stdout + run.stderr
