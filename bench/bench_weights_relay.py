#!/usr/bin/env python3
"""Relay push vs sequential rsync: 1 GiB to 4 lab nodes over shaped links (issue 6).

Every node's link (the host side of its management veth) and the jump host's uplink
(the lab bridge's egress, which carries everything the host sends to the nodes) are
shaped with `tc ... tbf rate 200mbit burst 256kb latency 50ms`. In one run, side by side:

    push-1      ascendctl weights push to one node            (the time to reach one)
    relay-N     ascendctl weights push to N nodes, relayed     ratio relay-N / push-1
    rsync-1     rsync from the jump host to one node
    rsync-seq   rsync from the jump host to each node in turn  ratio rsync-seq / rsync-1

Target: relay ratio ≤ 1.3 (sequential rsync ≈ N). Results go to bench/results/ (a
table on stdout). Every qdisc this script adds is removed, the lab is taken down.

    sudo .venv/bin/python bench/bench_weights_relay.py [--size-mib 1024] [--nodes 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from result_files import save_results  # noqa: E402

TBF = ["tbf", "rate", "{rate}", "burst", "256kb", "latency", "50ms"]
ROOT = "/var/lib/ascendctl"


def sh(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


class Shaper:
    """Adds tbf qdiscs and always removes exactly the ones it added."""

    def __init__(self, rate: str):
        self.rate, self.devices = rate, []

    def add(self, device: str) -> None:
        sh(["tc", "qdisc", "add", "dev", device, "root",
            *[part.format(rate=self.rate) for part in TBF]])
        self.devices.append(device)

    def remove_all(self) -> None:
        while self.devices:
            device = self.devices.pop()
            subprocess.run(["tc", "qdisc", "del", "dev", device, "root"], check=False,
                           capture_output=True)


def make_model(directory: Path, size_mib: int, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    per_file = size_mib * (1 << 20) // files
    for number in range(files):
        path = directory / f"blob-{number:02d}.bin"
        if path.exists() and path.stat().st_size == per_file:
            continue
        with open(path, "wb") as handle:
            for _ in range(per_file // (8 << 20)):
                handle.write(os.urandom(8 << 20))
            handle.write(os.urandom(per_file % (8 << 20)))
    (directory / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))


def inventory_for(lab, path: Path, model: Path, hosts: list[str]) -> Path:
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    data["all"]["vars"]["model"] = {"source": str(model)}
    # tensor parallel over the nodes: every node needs the whole directory
    data["all"]["vars"]["serving"] = {"mode": "mp", "tensor_parallel_size": len(hosts),
                                      "pipeline_parallel_size": 1}
    for group in data["all"]["children"].values():
        group["hosts"] = {k: v for k, v in group["hosts"].items() if k in hosts}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def clear_nodes(lab, names: list[str]) -> None:
    for name in names:
        lab.exec(name, ["rm", "-rf", f"{ROOT}/store", "/var/tmp/rsync-bench"])


def timed_push(inventory: Path) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "weights", "push", "-i",
                           str(inventory), "--json", "--no-progress"], capture_output=True,
                          text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"push failed: {proc.stderr.strip()}")
    return elapsed, json.loads(proc.stdout)


def timed_rsync(lab, model: Path, names: list[str]) -> float:
    ssh = shlex.join(["ssh", "-i", str(lab.ssh_key), "-o",
                      f"UserKnownHostsFile={lab.known_hosts}", "-o",
                      "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-c",
                      "aes128-gcm@openssh.com"])
    started = time.monotonic()
    for name in names:
        node = lab.node(name)
        sh(["rsync", "-a", "--whole-file", "-e", ssh, "--", f"{model}/",
            f"root@{node.mgmt_ip}:/var/tmp/rsync-bench/"])
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--lab", default="wbench")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/ascendctl-bench-weights"))
    parser.add_argument("--keep-lab", action="store_true")
    args = parser.parse_args()

    from ascendctl_lab import Lab

    model = args.work / "model"
    make_model(model, args.size_mib, args.files)
    lab = Lab(args.lab)
    lab.up(nodes=args.nodes)
    names = [n.name for n in lab.nodes]
    inv_all = inventory_for(lab, args.work / "inv-all.yaml", model, names)
    inv_one = inventory_for(lab, args.work / "inv-one.yaml", model, names[:1])
    os.environ.setdefault("ASCENDCTL_HASH_CACHE", str(args.work / "hash-cache.json"))
    subprocess.run([sys.executable, "-m", "ascendctl", "weights", "manifest", str(model)],
                   check=True, capture_output=True)          # hash once, outside the timings
    shaper = Shaper(args.rate)
    results: dict = {"size_bytes": sum(p.stat().st_size for p in model.iterdir()),
                     # hops use per-push keys (weights/hopkeys.py), never `ssh -A`
                     "agent_forwarding": False,
                     "nodes": args.nodes, "rate": args.rate,
                     "ideal_one_node_s": sum(p.stat().st_size for p in model.iterdir()) * 8
                     / (int(args.rate.removesuffix("mbit")) * 1e6)}
    try:
        for node in lab.nodes:
            shaper.add(lab.net.host_mgmt_veth(node.rank))
        shaper.add(lab.net.mgmt_bridge)
        clear_nodes(lab, names)
        results["push_1_s"], _ = timed_push(inv_one)
        clear_nodes(lab, names)
        results["relay_n_s"], summary = timed_push(inv_all)
        results["relay_links"] = summary["links"]
        results["relay_jump_bytes"] = summary["bytes_from_jump_host"]
        clear_nodes(lab, names)
        results["rsync_1_s"] = timed_rsync(lab, model, names[:1])
        clear_nodes(lab, names)
        results["rsync_seq_n_s"] = timed_rsync(lab, model, names)
        clear_nodes(lab, names)
    finally:
        shaper.remove_all()
        if not args.keep_lab:
            lab.down()
    results["relay_ratio"] = results["relay_n_s"] / results["push_1_s"]
    results["rsync_seq_ratio"] = results["rsync_seq_n_s"] / results["rsync_1_s"]
    rows = [("push (relay) to 1 node", results["push_1_s"], 1.0),
            (f"push (relay) to {args.nodes} nodes", results["relay_n_s"],
             results["relay_ratio"]),
            ("rsync to 1 node", results["rsync_1_s"], 1.0),
            (f"rsync to {args.nodes} nodes, one after another", results["rsync_seq_n_s"],
             results["rsync_seq_ratio"])]
    print(f"{results['size_bytes'] / (1 << 30):.2f} GiB to {args.nodes} lab nodes, every "
          f"link and the jump host's uplink at {args.rate} (ideal one node: "
          f"{results['ideal_one_node_s']:.1f} s)")
    print(f"{'method':<42} {'wall s':>8} {'÷ one node':>11}")
    for label, seconds, ratio in rows:
        print(f"{label:<42} {seconds:>8.1f} {ratio:>11.2f}")
    verdict = "meets" if results["relay_ratio"] <= 1.3 else "MISSES"
    print(f"relay ratio {results['relay_ratio']:.2f} {verdict} the target ≤ 1.3; "
          f"sequential rsync {results['rsync_seq_ratio']:.2f}")
    out = save_results("weights_relay", results)
    print(f"results: {out}")
    return 0 if results["relay_ratio"] <= 1.3 else 1


if __name__ == "__main__":
    sys.exit(main())
