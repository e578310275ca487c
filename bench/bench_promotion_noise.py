#!/usr/bin/env python3
"""How often the regression gate refuses an unchanged release on this machine (issue 23:
"an unchanged release passes 10 times out of 10 on the lab").

On one lab of two single-node serving groups (`lab up --replicas 2`) with the real vLLM
CPU build, both serving the same release, in one run: N times `ascendctl bench --compare
R R` (the release on replica0 against the same release on replica1, side by side in
paired rounds run on both heads at once, the lab's profile and rounds), then the count
of passes and each comparison's ratios. Results: bench/results/bench_promotion_noise-*.json and a table on
stdout. The lab is taken down at the end (unless --keep).

    flock /run/lock/ascendctl-engine-slot .venv/bin/python bench/bench_promotion_noise.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from result_files import save_results  # noqa: E402

# the regression gate at the lab's scale (tests/lab/test_replicas_lab.py's lab_promotion)
PROMOTION = {"gates": ["regression"], "rounds": 9, "confidence": 0.99,
             "profile": {"input_len": 64, "output_len": 16, "concurrency": 4,
                         "prompts_per_round": 16, "timeout_s": 120}}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ascendctl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "ASCENDCTL_PLAIN": "1"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    parser.add_argument("--lab", help="use this lab (up, from an earlier --keep) instead of a new one")
    args = parser.parse_args()
    from ascendctl_lab import Lab
    from tests.conftest import unique_lab_name

    lab = Lab(args.lab) if args.lab else Lab(unique_lab_name("pnoise")).up(nodes=2, replicas=2)
    try:
        data = yaml.safe_load(Path(lab.inventory_path).read_text())
        data["all"]["vars"]["slo"]["promotion"] = PROMOTION
        data["all"]["vars"]["deploy"] = {"rolling": {"max_unavailable": 2}}
        inventory = Path(lab.inventory_path).with_name("noise.yaml")
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        deployed = ascendctl("deploy", "-i", str(inventory), "--yes", "--json")
        if deployed.returncode != 0:
            raise SystemExit(deployed.stdout[-3000:] + deployed.stderr[-3000:])
        release = json.loads(deployed.stdout)["outcome"]["release_id"]
        say(f"{release} serves on both groups; {args.runs} comparisons of it with itself")
        runs = []
        for index in range(args.runs):
            started = time.monotonic()
            done = ascendctl("bench", "-i", str(inventory), "--compare", release, release,
                             "--json")
            seconds = time.monotonic() - started
            report = json.loads(done.stdout)
            gate = report["gates"][0]
            record = json.loads(lab.exec("node0", ["cat", gate["record"]]).stdout)
            figures = {f["figure"]: round(f["ratio"], 4)
                       for f in record["verdict"]["figures"]}
            runs.append({"exit": done.returncode, "passed": gate["passed"],
                         "ratios": figures, "seconds": round(seconds, 1)})
            say(f"{index + 1}/{args.runs}: {'pass' if gate['passed'] else 'FAIL'} {figures} "
                f"({seconds:.0f} s)")
        passes = sum(1 for r in runs if r["passed"])
        print(f"\nunchanged release {release}: {passes} of {len(runs)} comparisons passed "
              f"({PROMOTION['rounds']} paired rounds each, confidence "
              f"{PROMOTION['confidence']})")
        print(f"{'run':>4} {'throughput':>11} {'p99 TTFT':>9} {'p99 TPOT':>9} {'s':>5}")
        for index, run in enumerate(runs, 1):
            r = run["ratios"]
            print(f"{index:>4} {r['output_throughput']:>11.3f} {r['p99_ttft_ms']:>9.3f} "
                  f"{r['p99_tpot_ms']:>9.3f} {run['seconds']:>5.0f}")
        save_results("bench_promotion_noise", {"release": release, "promotion": PROMOTION,
                                               "runs": runs, "passed": passes})
        return 0 if passes == len(runs) else 1
    finally:
        if not args.keep:
            lab.down()


if __name__ == "__main__":
    sys.exit(main())
