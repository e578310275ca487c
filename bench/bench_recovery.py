#!/usr/bin/env python3
"""Time from a rank's death to serving again vs the engine's cold start-up (issue 15).

On one 2-node lab with the real vLLM CPU build (PP=2, multi-node MP mode, API key), in
one run:

    cold start     every rank stopped, then started in rank order the way deploy does
                   (head, then the follower once the head is up), until a real completion
                   answers through the API key
    follower kill  kill -9 of the follower's engine until a completion answers again,
                   with nobody acting but the nodes' agents and the head's supervisor
    head kill      the same for the head's engine
    head frozen    SIGSTOP of the head's engine (found by the deep probe only)

and for each fault when `ascendctl status` first said anything but healthy (and its exit
code), and the supervisor's own figure (detection to recovered). Target: death -> serving
<= cold start + 60 s. Results: bench/results/bench_recovery-*.json and a table on stdout.
The lab is taken down at the end (unless --keep).

    flock /run/lock/ascendctl-engine-slot .venv/bin/python bench/bench_recovery.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from result_files import save_results  # noqa: E402
API_KEY = "sk-bench-" + "recovery0a1b2c3d"
KEY_ENV = "ASCENDCTL_BENCH_API_KEY"
ENGINE = "ascendctl-engine.service"
ROOT = "/var/lib/ascendctl"
TARGET_MARGIN_S = 60.0
GUARD_S = 900.0
# the lab's policy (the defaults are sized for a real cluster's minutes-long start-up)
HEALTH = {"probe_failure_s": 15, "stable_s": 20}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, lab, inventory: Path):
        self.lab, self.inventory = lab, inventory
        self.url = f"http://{lab.nodes[0].mgmt_ip}:8000/v1/completions"

    def sh(self, node: str, script: str) -> str:
        return self.lab.exec(node, ["sh", "-c", script], check=True).stdout

    def ascendctl(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
        return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)

    def completes(self) -> bool:
        body = json.dumps({"model": "tiny", "prompt": "Hi", "max_tokens": 1,
                           "temperature": 0}).encode()
        request = urllib.request.Request(self.url, data=body, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return bool(json.load(response).get("choices"))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def wait_serving(self, since: float) -> float:
        while not self.completes():
            if time.monotonic() - since > GUARD_S:
                raise RuntimeError(f"not serving within {GUARD_S:.0f} s")
            time.sleep(0.5)
        return time.monotonic() - since

    def status(self) -> tuple[int, dict]:
        result = self.ascendctl("status", "-i", str(self.inventory), "--json", timeout=120)
        return result.returncode, json.loads(result.stdout)

    def engine_pid(self, node: str) -> int:
        main = self.sh(node, f"systemctl show -p MainPID --value {ENGINE}").strip()
        return int(self.sh(node, f"pgrep -P {main} | head -1").strip())

    def wait_stable(self) -> None:
        deadline = time.monotonic() + GUARD_S
        while True:
            sup = self.status()[1].get("supervisor") or {}
            if sup.get("phase") == "serving" and sup.get("attempt") == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the supervisor never became stable")
            time.sleep(3)

    def cold_start(self) -> float:
        """Stop the group with recovery held, then start it in rank order as deploy does."""
        hold = json.dumps({"until": time.time() + 1800, "by": "bench_recovery",
                           "reason": "cold start"})
        self.sh("node0", f"echo '{hold}' > {ROOT}/supervisor.hold")
        for node in ("node1", "node0"):
            self.sh(node, f"systemctl stop {ENGINE}")
        started = time.monotonic()
        self.sh("node0", f"systemctl start {ENGINE}")
        # deploy's rule: the head is up when it listens on the master port (or after 5 s)
        while not self.sh("node0", "ss -Hltn 'sport = :29501' || true").strip() and \
                time.monotonic() - started < 5:
            time.sleep(0.2)
        self.sh("node1", f"systemctl start {ENGINE}")
        seconds = self.wait_serving(started)
        self.sh("node0", f"rm -f {ROOT}/supervisor.hold")
        return seconds

    def fault(self, name: str, node: str, signal: str) -> dict:
        self.wait_stable()
        before = len(self.recovery_events())
        pid = self.engine_pid(node)
        self.sh(node, f"kill -{signal} {pid}")
        killed = time.monotonic()
        code, data = self.status()
        first_status = {"seconds": round(time.monotonic() - killed, 2), "exit": code,
                        "verdict": data["verdict"], "reason": (data["reasons"] or [""])[0]}
        serving = self.wait_serving(killed)
        self.wait_stable()
        events = self.recovery_events()[before:]
        recovered = next((e for e in events if e["stage"] == "recovered"), {})
        started = next((e for e in events if e["stage"] == "started"), {})
        say(f"{name}: serving again {serving:.1f} s after the fault; status said "
            f"{first_status['verdict']} (exit {code}) {first_status['seconds']} s after it")
        return {"fault": name, "node": node, "signal": signal,
                "death_to_serving_s": round(serving, 1), "first_status": first_status,
                "supervisor_detect_to_recovered_s": recovered.get("seconds"),
                "cause": started.get("cause"), "events": [e["stage"] for e in events]}

    def recovery_events(self) -> list[dict]:
        result = self.ascendctl("events", "-i", str(self.inventory), "--kind", "recovery",
                                "--json", timeout=120)
        return json.loads(result.stdout)["events"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab-name", default=f"h5rb{os.getpid() % 10000}")
    parser.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root: the bench brings up its own lab (systemd-nspawn)", file=sys.stderr)
        return 2
    from ascendctl import __version__
    from ascendctl_lab import Lab

    lab = Lab(args.lab_name)
    say(f"lab {args.lab_name}: up")
    lab.up(nodes=2)
    try:
        data = yaml.safe_load(Path(lab.inventory_path).read_text())
        data["all"]["vars"]["serving"].update({"api_key": {"env": KEY_ENV}, "health": HEALTH})
        inventory = Path(lab.state_dir) / "bench-recovery.yaml"
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        bench = Bench(lab, inventory)
        say("deploy")
        deployed = time.monotonic()
        result = bench.ascendctl("deploy", "-i", str(inventory), "--yes")
        if result.returncode != 0:
            print(result.stdout[-3000:] + result.stderr[-3000:], file=sys.stderr)
            return 1
        deploy_s = time.monotonic() - deployed
        say("cold start")
        cold = bench.cold_start()
        say(f"cold start: {cold:.1f} s")
        faults = [bench.fault("follower kill -9", "node1", "KILL"),
                  bench.fault("head kill -9", "node0", "KILL"),
                  bench.fault("head SIGSTOP", "node0", "STOP")]
    finally:
        if not args.keep:
            lab.down()
    worst = max(f["death_to_serving_s"] for f in faults)
    result = {
        "bench": "gang recovery: a rank's death to serving again vs cold start (lab, PP=2)",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "loadavg_at_end": os.getloadavg()},
        "versions": {"ascendctl": __version__}, "health_policy": HEALTH,
        "deploy_s": round(deploy_s, 1), "cold_start_s": round(cold, 1), "faults": faults,
        "target": f"death -> serving <= cold start + {TARGET_MARGIN_S:.0f} s",
        "target_met": worst <= cold + TARGET_MARGIN_S,
    }
    out = save_results("bench_recovery", result)
    print(f"\ngang recovery on the lab (2 nodes, PP=2, vLLM CPU build; {os.cpu_count()} shared "
          f"CPUs, so ratios only)")
    print(f"  cold start (rank-ordered, to the first completion): {cold:6.1f} s")
    print(f"  {'fault':<18} {'death->serving':>14} {'vs cold':>8} {'status first said':>30}")
    for f in faults:
        first = f["first_status"]
        print(f"  {f['fault']:<18} {f['death_to_serving_s']:>12.1f} s {f['death_to_serving_s'] - cold:>+7.1f} "
              f"{first['verdict'] + ' (exit ' + str(first['exit']) + ') after ' + str(first['seconds']) + ' s':>30}")
    print(f"  target {result['target']}: {'met' if result['target_met'] else 'NOT met'}")
    print(f"results: {out}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
