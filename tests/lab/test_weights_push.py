"""Weights push on the lab: resume after a kill, corruption found and repaired, disk
refused before the first byte, index escapes refused (acceptance 2-5 of issue 6)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

ROOT = "/var/lib/ascendctl"
STORE = f"{ROOT}/store"


# -- helpers (also used by test_weights_pp_vllm.py) ---------------------------------------

def build_model(out: Path, seed: int) -> Path:
    """The lab's tiny Qwen3 (one file per stage), with weights of its own seed."""
    from ascendctl_lab.model import build_model as lab_build_model

    lab_build_model(out, seed=seed)
    return out


def write_inventory(lab, path: Path, model_dir: Path, *, hosts: list[str] | None = None,
                    serving: dict | None = None) -> Path:
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    all_vars = data["all"]["vars"]
    all_vars["model"] = {**all_vars.get("model", {}), "source": str(model_dir)}
    all_vars["model"].pop("path", None)
    if serving:
        all_vars["serving"] = {**all_vars.get("serving", {}), **serving}
    if hosts is not None:
        for group in data["all"]["children"].values():
            group["hosts"] = {k: v for k, v in group["hosts"].items() if k in hosts}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_listing(lab, node: str) -> tuple[set[str], dict[str, int]]:
    """(complete objects, partial files with their sizes) in the node's store."""
    proc = lab.exec(node, ["sh", "-c", f"cd {STORE} 2>/dev/null && find sha256 partial "
                                       "-type f -printf '%p %s\\n' 2>/dev/null; true"])
    objects, partials = set(), {}
    for line in proc.stdout.split("\n"):
        if not line.strip():
            continue
        path, size = line.rsplit(" ", 1)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("sha256/") and not name.endswith(".meta"):
            objects.add(name)
        elif path.startswith("partial/"):
            partials[name.removesuffix(".part")] = int(size)
    return objects, partials


def relay_helpers_running(lab, node: str) -> bool:
    proc = lab.exec(node, ["pgrep", "-f", r"ascendctl-weights-.*\.py .* relay"], check=False)
    return proc.returncode == 0


# -- acceptance 2: a push killed midway sends only what was missing -----------------------

def test_killed_push_resumes_sending_only_what_was_missing(lab, tmp_path):
    from ascendctl_lab.hostcmd import run

    model = build_model(tmp_path / "model", seed=21)
    blob = model / "extra-weights.bin"          # a big non-weight file: every node, relayed
    blob.write_bytes(os.urandom(48 << 20))
    blob_sha = sha256_of(blob)
    inventory = write_inventory(lab, tmp_path / "inv.yaml", model)
    plan = json.loads(cli("weights", "plan", "-i", str(inventory), "--json").stdout)
    distinct = {f["sha256"]: f["size"] for n in plan["nodes"] for f in n["files"]}

    bridge = lab.net.mgmt_bridge                 # the jump host's uplink to every node
    run(["tc", "qdisc", "add", "dev", bridge, "root", "tbf", "rate", "40mbit",
         "burst", "256kb", "latency", "50ms"])
    try:
        push = subprocess.Popen([sys.executable, "-m", "ascendctl", "weights", "push",
                                 "-i", str(inventory), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            _, partials = store_listing(lab, "node0")
            if partials.get(blob_sha, 0) > 0.4 * blob.stat().st_size:
                break
            assert push.poll() is None, "the push ended before it could be interrupted"
            time.sleep(0.3)
        push.send_signal(signal.SIGKILL)
        push.wait(timeout=30)
    finally:
        run(["tc", "qdisc", "del", "dev", bridge, "root"], check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(relay_helpers_running(lab, n)
                                              for n in ("node0", "node1")):
        time.sleep(0.5)
    listing = {n: store_listing(lab, n) for n in ("node0", "node1")}
    have = {n: listing[n][1].get(blob_sha, 0) for n in listing}
    assert 0 < min(have.values()) < blob.stat().st_size, have
    for node in ("node0", "node1"):
        assert blob_sha not in listing[node][0]
    wanted = {n["name"]: {f["sha256"]: f["size"] for f in n["files"]} for n in plan["nodes"]}

    def held(node: str, sha: str) -> int:
        objects, partials = listing[node]
        return wanted[node][sha] if sha in objects else partials.get(sha, 0)

    # what the jump host must still send: objects no node holds, from the first byte
    # that some node lacks (an object one node holds is relayed from that node)
    expected = 0
    for sha, size in distinct.items():
        targets = [n for n in wanted if sha in wanted[n]]
        if not any(sha in listing[n][0] for n in targets):
            expected += size - min(held(n, sha) for n in targets)

    second = cli("weights", "push", "-i", str(inventory), "--json", "--no-progress")
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    resumed = min(have.values())
    assert summary["bytes_from_jump_host"] == expected
    assert expected <= sum(distinct.values()) - resumed
    nodes = {n["name"]: n for n in summary["nodes"]}
    for node in ("node0", "node1"):
        # each node wrote exactly what it lacked (counted on the node, not the jump host)
        assert nodes[node]["written"] == sum(size - held(node, sha)
                                             for sha, size in wanted[node].items())
    links = {(link["from"], link["to"]): link["bytes"] for link in summary["links"]}
    assert links[("node0", "node1")] >= blob.stat().st_size - have["node1"]  # relayed
    print(f"\nresume: node0 had {have['node0']} B, node1 {have['node1']} B of "
          f"{blob.stat().st_size} B; second push sent {summary['bytes_from_jump_host']} B "
          f"of {sum(distinct.values())} B")
    verify = cli("weights", "verify", "-i", str(inventory), "--full")
    assert verify.returncode == 0, verify.stdout + verify.stderr


# -- acceptance 3: a corrupted byte is named by verify and repaired by push ---------------

def flip_byte(lab, node: str, path: str, offset: int) -> None:
    lab.exec(node, ["python3", "-c",
                    "import os,sys\np=os.path.realpath(sys.argv[1]);o=int(sys.argv[2])\n"
                    "os.chmod(p,0o644)\nwith open(p,'r+b') as f:\n f.seek(o);b=f.read(1)\n"
                    " f.seek(o);f.write(bytes([b[0]^0xFF]))\n", path, str(offset)])


def test_corrupted_byte_is_named_and_repaired(lab, tmp_path):
    model = build_model(tmp_path / "model", seed=31)
    inventory = write_inventory(lab, tmp_path / "inv.yaml", model)
    first = cli("weights", "push", "-i", str(inventory), "--no-progress")
    assert first.returncode == 0, first.stderr
    stage1_file = "model-00004-of-00004.safetensors"     # final norm + lm_head: node1 only
    shared_file = "tokenizer.json"                       # every node
    release = f"{ROOT}/releases/wtest-corrupt/model"
    assert cli("weights", "link", "-i", str(inventory), "--dest", release).returncode == 0
    flip_byte(lab, "node1", f"{release}/{stage1_file}", 40_000)
    flip_byte(lab, "node1", f"{release}/{shared_file}", 1000)

    for extra in ([], ["--full"]):
        verify = cli("weights", "verify", "-i", str(inventory), *extra)
        assert verify.returncode == 1
        assert f"node1: {stage1_file}" in verify.stderr
        assert "node1: MISMATCH" in verify.stdout and shared_file in verify.stdout
        assert "node0: ok" in verify.stdout

    repair = cli("weights", "push", "-i", str(inventory), "--json", "--no-progress")
    assert repair.returncode == 0, repair.stderr
    summary = json.loads(repair.stdout)
    nodes = {n["name"]: n for n in summary["nodes"]}
    assert nodes["node1"]["repaired"] == sorted([stage1_file, shared_file])
    assert nodes["node0"]["repaired"] == [] and nodes["node0"]["written"] == 0
    links = {(link["from"], link["to"]): link["bytes"] for link in summary["links"]}
    # only node1 lacks the stage-1 file: from the jump host; node0 serves the shared one
    assert summary["bytes_from_jump_host"] == (model / stage1_file).stat().st_size
    assert links[("node0", "node1")] >= (model / shared_file).stat().st_size
    verify = cli("weights", "verify", "-i", str(inventory), "--full")
    assert verify.returncode == 0, verify.stdout
    # the release's symlink points at the repaired object again
    check = lab.exec("node1", ["sha256sum", f"{release}/{stage1_file}"]).stdout.split()[0]
    assert check == sha256_of(model / stage1_file)


# -- acceptance 4: not enough disk is refused before anything is sent ---------------------

def test_not_enough_disk_refused_before_the_first_byte(lab, tmp_path):
    model = build_model(tmp_path / "model", seed=41)
    inventory = write_inventory(lab, tmp_path / "inv.yaml", model)
    shas = {sha256_of(p) for p in model.glob("model-*.safetensors")}   # unique to this seed
    lab.fault("node1", "disk-small", "160K")
    try:
        push = cli("weights", "push", "-i", str(inventory), "--no-progress")
        assert push.returncode == 1
        assert "not enough disk, nothing was sent" in push.stderr
        assert "node1 needs" in push.stderr and "free" in push.stderr
        assert "node0 needs" not in push.stderr
        for node in ("node0", "node1"):
            objects, partials = store_listing(lab, node)
            assert not (objects | set(partials)) & shas, f"{node} received something"
    finally:
        lab.heal("node1")
    for node in ("node0", "node1"):
        objects, partials = store_listing(lab, node)
        assert not (objects | set(partials)) & shas


# -- acceptance 5: an index naming a file outside the model directory ---------------------

@pytest.mark.parametrize("how", ["index", "symlink"])
def test_index_escaping_the_model_directory_is_rejected(lab, tmp_path, how):
    model = build_model(tmp_path / "model", seed=51)
    index_path = model / "model.safetensors.index.json"
    if how == "index":
        index = json.loads(index_path.read_text())
        index["weight_map"]["lm_head.weight"] = "../../etc/passwd"
        index_path.write_text(json.dumps(index, indent=2))
    else:
        target = model / "model-00004-of-00004.safetensors"
        target.unlink()
        target.symlink_to("/etc/passwd")
    inventory = write_inventory(lab, tmp_path / "inv.yaml", model)
    before = {n: store_listing(lab, n) for n in ("node0", "node1")}
    push = cli("weights", "push", "-i", str(inventory), "--no-progress")
    assert push.returncode == 2
    assert len(push.stderr.strip().splitlines()) == 1
    assert str(index_path if how == "index" else model) in push.stderr
    assert ("escapes the model directory" if how == "index"
            else "outside the model directory") in push.stderr
    if how == "index":
        line = next(i for i, text in enumerate(index_path.read_text().splitlines(), 1)
                    if "lm_head.weight" in text)
        assert f"{index_path}:{line}: weight_map.lm_head.weight:" in push.stderr
    assert {n: store_listing(lab, n) for n in ("node0", "node1")} == before


# -- verified on arrival: bytes that do not match the manifest fail, naming node and file -

def test_mismatch_on_arrival_names_node_and_file(lab, tmp_path):
    from ascendctl.load import load_inventory
    from ascendctl.weights.plan import plan_for_inventory
    from ascendctl.weights.push import push

    model = build_model(tmp_path / "model", seed=61)
    inventory = load_inventory(write_inventory(lab, tmp_path / "inv.yaml", model))
    plan = plan_for_inventory(inventory)
    # the file changes after it was hashed (same size): what arrives is not what was planned
    target = model / "model-00003-of-00004.safetensors"          # layer 1: node1 only
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF
    target.write_bytes(data)
    summary = push(inventory, plan, show_progress=False)
    assert not summary.ok
    assert any(e.startswith("node1: model-00003-of-00004.safetensors:") and "sha256" in e
               for e in summary.errors), summary.errors
    assert summary.nodes["node1"]["ok"] is False and summary.nodes["node0"]["ok"] is True
    planned_sha = plan.node("node1").files[[f.path for f in plan.node("node1").files]
                                           .index(target.name)].entry.sha256
    objects, partials = store_listing(lab, "node1")
    assert planned_sha not in objects and planned_sha not in partials


# -- relay hops check host keys as strictly as the first hop ------------------------------

def test_relay_hop_refuses_a_node_whose_host_key_does_not_match(lab, tmp_path):
    from ascendctl.load import load_inventory
    from ascendctl.transport import SshPool
    from ascendctl.weights.hopkeys import HopKeys
    from ascendctl.weights.plan import plan_for_inventory
    from ascendctl.weights.push import build_chains, gather_states
    from ascendctl.weights.relay import RELAY_KNOWN_HOSTS, run_chain
    from ascendctl.weights.remote import node_access

    model = build_model(tmp_path / "model", seed=71)
    (model / "shared.bin").write_bytes(os.urandom(1 << 20))      # for both nodes: relayed
    inv = load_inventory(write_inventory(lab, tmp_path / "inv.yaml", model))
    plan = plan_for_inventory(inv)
    node1 = inv.host("node1")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "impostor")], check=True)
    impostor = (tmp_path / "impostor.pub").read_text().split()
    forged = f"{node1.address} {impostor[0]} {impostor[1]}\n"
    accesses = {h.name: node_access(inv, h) for h in inv.hosts}
    with SshPool(inv.hosts) as pool:
        states = gather_states(pool, inv, plan, repair=True)
        lab.exec("node0", ["sh", "-c", 'cat > "$1"', "sh", f"{ROOT}/{RELAY_KNOWN_HOSTS}"],
                 input=forged)
        chains = [c for c in build_chains(plan, states, accesses) if len(c[0]) == 2]
        assert chains and [a.name for a in chains[0][0]] == ["node0", "node1"]
        hop_keys = HopKeys.for_chains(pool, accesses, chains[:1])
        try:
            hop_keys.install()
            result = run_chain(*chains[0], env=None, on_event=lambda event: None,
                               push_id=hop_keys.push_id)
        finally:
            assert hop_keys.remove() == []
            lab.exec("node0", ["rm", "-f", f"{ROOT}/{RELAY_KNOWN_HOSTS}"])
    assert result.exit_code != 0
    assert any("node1" in e for e in result.errors), result.errors
    assert any("Host key verification failed" in e for e in result.errors), result.errors
    assert not [key for key, verdict in result.objects.items()
                if key[0] == "node1" and verdict.get("ok")]
    shared_sha = sha256_of(model / "shared.bin")
    assert shared_sha in store_listing(lab, "node0")[0]           # node0 still got its copy
    assert shared_sha not in store_listing(lab, "node1")[0]


# -- no agent forwarding: per-push hop keys, restricted and removed ------------------------

def test_hop_keys_run_only_the_relay_from_the_upstream_and_are_removed(lab, tmp_path):
    from ascendctl.load import load_inventory
    from ascendctl.transport import SshPool
    from ascendctl.weights.hopkeys import HopKeys
    from ascendctl.weights.plan import plan_for_inventory
    from ascendctl.weights.push import build_chains, gather_states
    from ascendctl.weights.remote import node_access

    model = build_model(tmp_path / "model", seed=73)
    (model / "shared.bin").write_bytes(os.urandom(1 << 20))
    inv = load_inventory(write_inventory(lab, tmp_path / "inv.yaml", model))
    plan = plan_for_inventory(inv)
    node1 = inv.host("node1")
    accesses = {h.name: node_access(inv, h) for h in inv.hosts}
    with SshPool(inv.hosts) as pool:
        states = gather_states(pool, inv, plan, repair=True)
        chains = [c for c in build_chains(plan, states, accesses) if len(c[0]) == 2]
        hop_keys = HopKeys.for_chains(pool, accesses, chains[:1])
        hop_keys.install()
        try:
            key = f"{ROOT}/{hop_keys.hops[0].key_rel}"
            lines = lab.exec("node1", ["cat", "/root/.ssh/authorized_keys"]).stdout
            # only this push's key: a node a push could not reach (the host-key test above)
            # keeps that push's key until its expiry-time
            tag = f"ascendctl-relay-{hop_keys.push_id}"
            entry = next(line for line in lines.splitlines() if line.endswith(" " + tag))
            assert entry.startswith('restrict,command="') and 'from="' in entry
            # from node0, the hop key runs the relay whatever is asked (stdin closed: the
            # relay reports an unfinished stream), never `id`
            asked = lab.exec("node0", ["ssh", "-o", "BatchMode=yes", "-o",
                                       "StrictHostKeyChecking=no", "-o",
                                       "UserKnownHostsFile=/dev/null", "-i", key, "-a",
                                       "-l", "root", "--", node1.address, "id"],
                             check=False, input="")
            assert "uid=" not in asked.stdout and '"ev":"done"' in asked.stdout
            # the same key from anywhere else (here: the jump host) is refused (from=)
            copy = tmp_path / "stolen"
            copy.write_text(lab.exec("node0", ["cat", key]).stdout)
            copy.chmod(0o600)
            stolen = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o",
                                     f"UserKnownHostsFile={lab.known_hosts}", "-o",
                                     "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
                                     "-i", str(copy), "-l", "root", "--", node1.address,
                                     "id"], capture_output=True, text=True, timeout=60,
                                    stdin=subprocess.DEVNULL)
            assert stolen.returncode != 0 and "uid=" not in stolen.stdout
        finally:
            assert hop_keys.remove() == []
    assert tag not in lab.exec("node1", ["cat", "/root/.ssh/authorized_keys"]).stdout
    left = lab.exec("node0", ["sh", "-c", f"ls -A {ROOT}/tmp/relay-keys 2>/dev/null || true"])
    assert hop_keys.push_id not in left.stdout
