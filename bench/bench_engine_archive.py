#!/usr/bin/env python3
"""An engine image archive to 4 lab nodes vs to one, over shaped links (issue 14, acc. 5).

The archive travels like the weights (ascendctl.weights.files_push: relayed, resumable,
verified by sha256 into each node's store). Links shaped as bench_weights_relay.py does:
every node's veth and the jump host's uplink (the lab bridge) at `tbf rate 200mbit burst
256kb latency 50ms`. Timed, each from empty stores:

    push-1   the archive into one node's store
    push-N   the archive into N nodes' stores (one relay chain)
    load-N   (with --load) then `podman load` on every node, in parallel

Target: push-N / push-1 ≤ 1.3. The default archive is a real image (the lab's base root
filesystem as one layer, ~230 MB: 9 s at 200 Mbit/s); `--full` uses the lab's vLLM engine
image (~4.1 GB, ~165 s per run). Results go to bench/results/; qdiscs and the lab are
removed at the end.

    sudo .venv/bin/python bench/bench_engine_archive.py [--nodes 4] [--full] [--load]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from result_files import save_results  # noqa: E402  (bench/ is on sys.path)

from bench_weights_relay import ROOT, Shaper  # noqa: E402

REFERENCE = "localhost/ascendctl-bench/base:1"


def small_archive(work: Path) -> Path:
    """A docker-archive of the lab's base root filesystem (a real, loadable image)."""
    from ascendctl.engine.archive import image_config, write_docker_archive, write_layer_tar
    from ascendctl_lab.image import ensure_image

    archive = work / "base-image.tar"
    if archive.exists():
        return archive
    base = ensure_image(print, with_vllm=False).layers[0]
    layer = write_layer_tar(base, work / "base-layer.tar")
    config = image_config([layer.diff_id], env=["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                          labels={"org.ascendctl.bench": "engine-archive"})
    write_docker_archive(archive, [layer], config, [REFERENCE])
    (work / "base-layer.tar").unlink()
    return archive


def inventory_for(lab, path: Path, archive: Path, reference: str, hosts: list[str]) -> Path:
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    variables = data["all"]["vars"]
    variables["serving"].pop("engine", None)
    variables["engine"] = {"kind": "container", "runtime": "podman", "image": reference,
                           "archive": str(archive)}
    for group in data["all"]["children"].values():
        group["hosts"] = {k: v for k, v in group["hosts"].items() if k in hosts}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def clear_nodes(lab, names: list[str]) -> None:
    for name in names:
        lab.exec(name, ["rm", "-rf", f"{ROOT}/store", f"{ROOT}/engines"])
        lab.exec(name, ["sh", "-c", "podman rmi --all --force >/dev/null 2>&1 || true"],
                 timeout=300)


def timed_push(inventory: Path, archive: Path) -> tuple[float, dict]:
    from ascendctl.load import load_inventory
    from ascendctl.weights.files_push import push_files

    inv = load_inventory(inventory)
    started = time.monotonic()
    summary, _files = push_files(inv, [archive], show_progress=False)
    elapsed = time.monotonic() - started
    if not summary.ok:
        raise SystemExit("push failed: " + "; ".join(summary.errors))
    return elapsed, summary.to_dict()


def timed_load(inventory: Path) -> tuple[float, dict]:
    from ascendctl.engine.present import ensure_engine, plan_engine
    from ascendctl.load import load_inventory
    from ascendctl.transport import SshPool

    inv = load_inventory(inventory)
    pool = SshPool(inv.hosts)
    try:
        plan = plan_engine(inv, pool)
        started = time.monotonic()
        result = ensure_engine(inv, pool, plan, show_progress=False)
        return time.monotonic() - started, {n: r.detail for n, r in result.items()}
    finally:
        pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--full", action="store_true",
                        help="the lab's 4.1 GB vLLM engine image instead of the 230 MB one")
    parser.add_argument("--load", action="store_true", help="also time podman load on every node")
    parser.add_argument("--lab", default="h4bench")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/ascendctl-bench-engine"))
    args = parser.parse_args()

    from ascendctl_lab import Lab

    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ASCENDCTL_HASH_CACHE", str(args.work / "hash-cache.json"))
    if args.full:
        from ascendctl_lab.engine_image import build_engine_image

        built = build_engine_image(progress=print)
        archive, reference = built.archive, built.image
    else:
        archive, reference = small_archive(args.work), REFERENCE
    from ascendctl.weights.files_push import hashed_files

    hashed_files([archive])                      # hash once, outside the timings
    lab = Lab(args.lab)
    lab.up(nodes=args.nodes)
    names = [n.name for n in lab.nodes]
    inv_all = inventory_for(lab, args.work / "inv-all.yaml", archive, reference, names)
    inv_one = inventory_for(lab, args.work / "inv-one.yaml", archive, reference, names[:1])
    size = archive.stat().st_size
    rate_bits = int(args.rate.removesuffix("mbit")) * 1e6
    results: dict = {"archive": str(archive), "size_bytes": size, "nodes": args.nodes,
                     "rate": args.rate, "ideal_one_node_s": size * 8 / rate_bits}
    shaper = Shaper(args.rate)
    try:
        for node in lab.nodes:
            shaper.add(lab.net.host_mgmt_veth(node.rank))
        shaper.add(lab.net.mgmt_bridge)
        clear_nodes(lab, names)
        results["push_1_s"], _ = timed_push(inv_one, archive)
        clear_nodes(lab, names)
        results["push_n_s"], summary = timed_push(inv_all, archive)
        results["push_n_links"] = summary["links"]
        results["push_n_jump_bytes"] = summary["bytes_from_jump_host"]
        if args.load:
            results["load_n_s"], results["load_n"] = timed_load(inv_all)
        clear_nodes(lab, names)
    finally:
        shaper.remove_all()
        lab.down()
    results["ratio"] = results["push_n_s"] / results["push_1_s"]
    print(f"{size / 1e6:.0f} MB image archive to {args.nodes} lab nodes, every link and the "
          f"jump host's uplink at {args.rate} (ideal one node: "
          f"{results['ideal_one_node_s']:.1f} s)")
    print(f"{'step':<36} {'wall s':>8} {'÷ one node':>11}")
    print(f"{'archive into 1 node':<36} {results['push_1_s']:>8.1f} {1.0:>11.2f}")
    print(f"{f'archive into {args.nodes} nodes (relayed)':<36} {results['push_n_s']:>8.1f} "
          f"{results['ratio']:>11.2f}")
    if args.load:
        print(f"{f'podman load on {args.nodes} nodes':<36} {results['load_n_s']:>8.1f}")
    verdict = "meets" if results["ratio"] <= 1.3 else "MISSES"
    print(f"ratio {results['ratio']:.2f} {verdict} the target ≤ 1.3; the jump host sent "
          f"{results['push_n_jump_bytes'] / size:.2f}× the archive")
    out = save_results("engine_archive", results)
    print(f"results: {out}")
    return 0 if results["ratio"] <= 1.3 else 1


if __name__ == "__main__":
    sys.exit(main())
