"""Acceptance 1 of issue 6: the tiny lab model, PP=2 on 2 lab nodes. Each node holds only
its stage's tensors, and the real vLLM multi-node deployment (head + headless follower,
mp backend, --nnodes 2 --pipeline-parallel-size 2) loading from those per-node
directories gives the same greedy completion as a single-node run of the full model.

At most two engine processes run at once (the single-node run is stopped before the
pipeline run starts); each is stopped by its PID, SIGTERM then SIGKILL after a grace.

Runs on the engine suite's shared lab (`gang`, tests/conftest.py), last: the deployment
there is stopped first (test_engine_venv_lab.py, before it, leaves it stopped)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from test_weights_push import cli, write_inventory

from ascendctl.plan.pp_split import stage_ranges
from ascendctl.weights.safetensors_file import read_header, tensor_bytes

pytestmark = pytest.mark.lab
# ... and runs right after that module (tests/conftest.py), on the same lab.
SHARES_DEPLOYMENT_OF = "test_engine_venv_lab"

ROOT = "/var/lib/ascendctl"
ENGINE = "/opt/vllm/bin/vllm"
PORT = 8000
MASTER_PORT = 29555
PROMPTS = ["hello world", "The cluster"]
# vLLM's CPU platform turns compile mode into inductor, which needs a C++ compiler the
# nodes do not have; DYNAMO_TRACE_ONCE with the eager backend keeps compile mode (PP on
# CPU fails in --enforce-eager) without one.
COMPILATION = json.dumps({"mode": 2, "backend": "eager"})

TENSORS_SCRIPT = r"""
import json, os, struct, sys
out = {}
root = sys.argv[1]
for name in sorted(os.listdir(root)):
    if name.endswith(".safetensors"):
        with open(os.path.join(root, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        out[name] = sorted(header)
with open(os.path.join(root, "model.safetensors.index.json")) as f:
    index = json.load(f)
print(json.dumps({"files": out, "index": index}))
"""


def node_tensors(lab, node: str, model_dir: str) -> dict:
    return json.loads(lab.exec(node, ["python3", "-c", TENSORS_SCRIPT, model_dir]).stdout)


class Engine:
    """`vllm serve` inside a node as a transient systemd unit; stopped by its main PID."""

    def __init__(self, lab, node: str, unit: str):
        self.lab, self.node, self.unit, self.pid = lab, node, unit, None

    def start(self, env: dict[str, str], args: list[str]) -> "Engine":
        self.lab.exec(self.node, ["systemctl", "reset-failed", self.unit], check=False)
        self.lab.exec(self.node, ["systemd-run", f"--unit={self.unit}",
                                  *[f"--setenv={k}={v}" for k, v in env.items()],
                                  ENGINE, "serve", *args])
        for _ in range(100):
            pid = self.lab.exec(self.node, ["systemctl", "show", "-p", "MainPID", "--value",
                                            self.unit]).stdout.strip()
            if pid not in ("", "0"):
                self.pid = int(pid)
                return self
            time.sleep(0.1)
        raise AssertionError(f"{self.node}: {self.unit} has no main PID")

    def alive(self) -> bool:
        return self.pid is not None and self.lab.exec(
            self.node, ["kill", "-0", str(self.pid)], check=False).returncode == 0

    def stop(self, grace: float = 20) -> None:
        if self.pid is None:
            return
        self.lab.exec(self.node, ["kill", "-TERM", str(self.pid)], check=False)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.5)
        if self.alive():
            self.lab.exec(self.node, ["kill", "-KILL", str(self.pid)], check=False)
        # the unit's leftover children (engine workers) go with its cgroup
        self.lab.exec(self.node, ["systemctl", "stop", self.unit], check=False)
        self.lab.exec(self.node, ["systemctl", "reset-failed", self.unit], check=False)
        self.pid = None

    def journal(self) -> str:
        return self.lab.exec(self.node, ["journalctl", "-u", self.unit, "--no-pager", "-n",
                                         "40"], check=False).stdout


def completions(ip: str, engines: list[Engine], timeout: float = 420) -> list[str]:
    """Greedy completions once the server answers a real request (not just /health)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        for engine in engines:
            assert engine.alive(), f"{engine.node} engine died:\n{engine.journal()}"
        try:
            texts = []
            for prompt in PROMPTS:
                body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 16,
                                   "temperature": 0}).encode()
                request = urllib.request.Request(f"http://{ip}:{PORT}/v1/completions",
                                                 data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    texts.append(json.load(response)["choices"][0]["text"])
            return texts
        except OSError as err:
            last = err
            time.sleep(2)
    raise AssertionError(f"no completion from {ip}:{PORT}: {last}\n{engines[0].journal()}")


def serve_args(model_dir: str, *extra: str) -> list[str]:
    return [model_dir, "--served-model-name", "tiny", "--max-model-len", "256",
            "--dtype", "bfloat16", "--kv-cache-memory-bytes", "64M",
            "--compilation-config", COMPILATION, *extra]


def merged_copy(model: Path, out: Path) -> Path:
    """The same checkpoint with every tensor in ONE file (so the file mixes stages)."""
    import shutil

    from ascendctl_lab.model import write_safetensors

    shutil.copytree(model, out, ignore=shutil.ignore_patterns("*.safetensors",
                                                              "*.index.json"))
    tensors = {}
    for path in sorted(model.glob("*.safetensors")):
        header = read_header(path)
        for info in header.tensors:
            assert info.dtype == "BF16"
            tensors[info.name] = (info.shape, tensor_bytes(header, info.name))
    write_safetensors(out / "model.safetensors", tensors)
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {name: "model.safetensors" for name in tensors}}))
    return out


def run_pipeline(lab, model_dir: str) -> list[str]:
    n0, n1 = lab.node("node0"), lab.node("node1")
    multi = ["--distributed-executor-backend", "mp", "--nnodes", "2",
             "--master-addr", n0.mgmt_ip, "--master-port", str(MASTER_PORT),
             "--pipeline-parallel-size", "2"]
    head = Engine(lab, "node0", "wtest-vllm-pp0")
    follower = Engine(lab, "node1", "wtest-vllm-pp1")
    try:
        head.start({"HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0",
                    "VLLM_HOST_IP": n0.mgmt_ip},
                   serve_args(model_dir, *multi, "--node-rank", "0",
                              "--host", n0.mgmt_ip, "--port", str(PORT)))
        follower.start({"HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "1",
                        "VLLM_HOST_IP": n1.mgmt_ip},
                       serve_args(model_dir, *multi, "--node-rank", "1", "--headless"))
        return completions(n0.mgmt_ip, [head, follower])
    finally:
        head.stop()
        follower.stop()


def test_pp2_nodes_hold_only_their_stage_and_match_single_node(gang, tmp_path):
    lab = gang["lab"]
    for node in ("node1", "node0"):      # a deployment's engines (a stop: hands off)
        lab.exec(node, ["systemctl", "stop", "ascendctl-engine"], check=False)
    inventory = Path(lab.inventory_path)
    data = yaml.safe_load(inventory.read_text())
    serving = data["all"]["vars"]["serving"]
    assert (serving["mode"], serving["tensor_parallel_size"],
            serving["pipeline_parallel_size"]) == ("mp", 1, 2)
    model = Path(data["all"]["vars"]["model"]["source"])
    n0 = lab.node("node0")

    # per-node stage directories, pushed and linked from the stores
    push = cli("weights", "push", "-i", str(inventory), "--json", "--no-progress")
    assert push.returncode == 0, push.stderr
    pp_dir = f"{ROOT}/releases/wtest-pp/model"
    link = cli("weights", "link", "-i", str(inventory), "--dest", pp_dir)
    assert link.returncode == 0, link.stderr

    # each node holds exactly its stage's tensors (vLLM's split of the 2 layers)
    config = json.loads((model / "config.json").read_text())
    (a0, b0), (a1, b1) = stage_ranges(config["num_hidden_layers"], 2)
    source_index = json.loads((model / "model.safetensors.index.json").read_text())
    everything = set(source_index["weight_map"])

    def layer_of(name: str) -> int | None:
        return int(name.split(".")[2]) if name.startswith("model.layers.") else None

    expected = {
        "node0": {t for t in everything if t == "model.embed_tokens.weight"
                  or (layer_of(t) is not None and a0 <= layer_of(t) < b0)},
        "node1": {t for t in everything if t in ("model.norm.weight", "lm_head.weight")
                  or (layer_of(t) is not None and a1 <= layer_of(t) < b1)},
    }
    assert expected["node0"] | expected["node1"] == everything
    for node in ("node0", "node1"):
        held = node_tensors(lab, node, pp_dir)
        tensors = {t for names in held["files"].values() for t in names}
        print(f"\n{node}: {sorted(tensors)}")
        assert tensors == expected[node]
        # its own index lists exactly the local files and tensors
        assert set(held["index"]["weight_map"].values()) == set(held["files"])
        assert set(held["index"]["weight_map"]) == tensors

    # reference: the full model on one node (a one-host inventory, whole directory)
    full_inventory = write_inventory(lab, tmp_path / "full.yaml", model, hosts=["node0"],
                                     serving={"pipeline_parallel_size": 1})
    assert cli("weights", "push", "-i", str(full_inventory), "--no-progress").returncode == 0
    full_dir = f"{ROOT}/releases/wtest-full/model"
    assert cli("weights", "link", "-i", str(full_inventory), "--dest",
               full_dir).returncode == 0
    assert set(node_tensors(lab, "node0", full_dir)["index"]["weight_map"]) == everything

    base_env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0",
                "VLLM_HOST_IP": n0.mgmt_ip}
    single = Engine(lab, "node0", "wtest-vllm-single")
    try:
        single.start(base_env, serve_args(full_dir, "--host", n0.mgmt_ip, "--port", str(PORT)))
        reference = completions(n0.mgmt_ip, [single])
    finally:
        single.stop()

    pipelined = run_pipeline(lab, pp_dir)
    print(f"single node: {reference!r}\npipeline:    {pipelined!r}")
    assert all(text for text in reference)
    assert pipelined == reference

    # the same checkpoint as ONE file mixing both stages, repacked per stage: each node
    # still holds only its stage's bytes, and the engine gives the same completion
    merged = merged_copy(model, tmp_path / "merged")
    merged_inventory = write_inventory(lab, tmp_path / "merged.yaml", merged)
    push = cli("weights", "push", "-i", str(merged_inventory), "--repack", "--json",
               "--no-progress")
    assert push.returncode == 0, push.stderr
    repack_dir = f"{ROOT}/releases/wtest-repack/model"
    assert cli("weights", "link", "-i", str(merged_inventory), "--repack", "--dest",
               repack_dir).returncode == 0
    for node in ("node0", "node1"):
        held = node_tensors(lab, node, repack_dir)
        assert {t for names in held["files"].values() for t in names} == expected[node]
        assert all(".pp" in name for name in held["files"])
    assert run_pipeline(lab, repack_dir) == reference
