#!/usr/bin/env python3
"""The operator's cycle on one lab, side by side: facts, preflight, no-op redeploy, status.

    python bench/bench_cycle.py                # as root; 2 nodes, ~3 min with the deploy
    python bench/bench_cycle.py --nodes 4      # 4 nodes (4 engines: needs 4 free cores)
    python bench/bench_cycle.py --rounds 5 --keep-lab

Brings up its own lab (`ascendctl lab up`, the real vLLM CPU build), deploys the tiny
model once (not timed), then times in rounds, each command once per round and in the
same order, against the same serving cluster:

  * ascendctl facts --json              gather every node's facts (one round trip each)
  * ascendctl preflight --json          gather + every check
  * ascendctl deploy --yes --json       the same inventory again: must report 0 changed
                                        and restart nothing (engine PIDs compared)
  * ascendctl status --json             one call per node, the engine's /health, metrics

Wall-clock time of each whole command (interpreter start-up included), median over the
rounds, and the two ratios the deploy redesign must keep:

  no-op redeploy <= 1.5 x preflight         status <= 0.35 x facts

Exit 0 when both hold, 1 when one does not (or a command failed). Results: a table on
stdout and JSON in bench/results/ (gitignored). The lab is taken down at the end unless
--keep-lab. It runs two or more vLLM engines for its whole duration: on a shared machine,
run it while no other engine runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from result_files import save_results  # bench/ is the script's directory

BENCH = Path(__file__).resolve().parent
COMMANDS = ("facts", "preflight", "no-op redeploy", "status")
RATIOS = (("no-op redeploy", "preflight", 1.5), ("status", "facts", 0.35))
BEFORE_REDESIGN = {"facts": 3.75, "preflight": 3.48, "no-op redeploy": 5.07, "status": 1.02}
DEPLOY_TIMEOUT_S = 1800


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ascendctl(*args: str, timeout: float = 600) -> tuple[float, subprocess.CompletedProcess]:
    """Run `python -m ascendctl ARGS` and return (wall seconds, the finished process)."""
    env = {**os.environ, "ASCENDCTL_PLAIN": "1"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started, done


def must(args: tuple[str, ...], done: subprocess.CompletedProcess, ok: tuple[int, ...] = (0,)
         ) -> None:
    if done.returncode not in ok:
        raise SystemExit(f"`ascendctl {' '.join(args)}` exited {done.returncode}:\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def engine_pids(lab: str, nodes: int) -> dict[str, str]:
    pids = {}
    for index in range(nodes):
        node = f"node{index}"
        _, done = ascendctl("lab", "exec", "--name", lab, node, "--", "systemctl", "show",
                            "-p", "MainPID", "--value", "ascendctl-engine", timeout=60)
        pids[node] = done.stdout.strip()
    return pids


def changed_count(report: dict) -> int:
    return sum(counts.get("changed", 0) for counts in report.get("recap", {}).values())


def one_round(inventory: str, lab: str, nodes: int) -> dict[str, float]:
    times: dict[str, float] = {}
    args: tuple[str, ...] = ("facts", "-i", inventory, "--json")
    times["facts"], done = ascendctl(*args)
    must(args, done)
    args = ("preflight", "-i", inventory, "--json")
    times["preflight"], done = ascendctl(*args)
    must(args, done, ok=(0, 3))
    before = engine_pids(lab, nodes)
    args = ("deploy", "-i", inventory, "--yes", "--json")
    times["no-op redeploy"], done = ascendctl(*args, timeout=DEPLOY_TIMEOUT_S)
    must(args, done)
    changed = changed_count(json.loads(done.stdout))
    if changed or engine_pids(lab, nodes) != before:
        raise SystemExit(f"the redeploy was not a no-op: {changed} changed, engine PIDs "
                         f"{before} -> {engine_pids(lab, nodes)}")
    args = ("status", "-i", inventory, "--json")
    times["status"], done = ascendctl(*args)
    must(args, done, ok=(0, 3))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, choices=(2, 4))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lab-name", default=f"bcyc{os.getpid() % 10000}")
    parser.add_argument("--keep-lab", action="store_true")
    args = parser.parse_args()

    say(f"lab up: {args.nodes} nodes ({args.lab_name})")
    _, done = ascendctl("lab", "up", "--name", args.lab_name, "--nodes", str(args.nodes),
                        timeout=1800)
    must(("lab", "up"), done)
    inventory = done.stdout.strip().splitlines()[-1]
    try:
        say("first deploy (not timed)")
        seconds, done = ascendctl("deploy", "-i", inventory, "--yes", "--json",
                                  timeout=DEPLOY_TIMEOUT_S)
        must(("deploy",), done)
        say(f"  deployed in {seconds:.1f}s")
        rounds = []
        for index in range(args.rounds):
            rounds.append(one_round(inventory, args.lab_name, args.nodes))
            say(f"  round {index + 1}: " + ", ".join(f"{k} {v:.2f}s"
                                                     for k, v in rounds[-1].items()))
    finally:
        if not args.keep_lab:
            ascendctl("lab", "down", "--name", args.lab_name, timeout=600)

    median = {name: statistics.median(r[name] for r in rounds) for name in COMMANDS}
    print(f"\n{args.nodes} lab nodes, median of {args.rounds} rounds (wall clock, "
          "interpreter start-up included)")
    print(f"  {'command':<16} {'seconds':>8} {'before':>8}")
    for name in COMMANDS:
        print(f"  {name:<16} {median[name]:8.2f} {BEFORE_REDESIGN[name]:8.2f}")
    verdicts = []
    for numerator, denominator, limit in RATIOS:
        ratio = median[numerator] / median[denominator]
        ok = ratio <= limit
        verdicts.append(ok)
        print(f"  {numerator} / {denominator} = {ratio:.2f} (limit {limit}) "
              f"{'ok' if ok else 'TOO SLOW'}")
    out = save_results(f"cycle-{args.nodes}n", {
        "nodes": args.nodes, "rounds": rounds, "median_s": median,
        "ratios": {f"{n}/{d}": median[n] / median[d] for n, d, _ in RATIOS},
        "limits": {f"{n}/{d}": limit for n, d, limit in RATIOS},
        "before_redesign_s": BEFORE_REDESIGN, "machine": platform.node(),
        "cpus": os.cpu_count()})
    print(f"results: {out}")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
