#!/usr/bin/env python3
"""`ascendctl preflight` on 2, 4 and 8 lab nodes, side by side with ansible-playbook
running the same gather commands on the same nodes.

    python bench/bench_preflight.py                 # as root; ~15-30 min (Ansible is slow)
    python bench/bench_preflight.py --sizes 2 --ansible-variants tuned   # quick look

For each size it brings up its own lab (`ascendctl lab`, 8 NPUs per node), then times in
the same run, against the same nodes:

  * ascendctl preflight --json        the whole command: gather (one remote execution per
                                      node, commands in parallel on the node), all checks
  * ansible-playbook (per command)    the same fact commands as Ansible tasks, one task
                                      per command (a loop over the host's ping targets
                                      for the ping matrix) - how an Ansible preflight is
                                      written; default settings, and tuned (pipelining,
                                      no fact gathering); forks = nodes in both
  * ansible-playbook (one script)     for context: the whole gather script as one
                                      `script` task (Ansible as a mere SSH launcher)

The commands Ansible runs are taken from the gather script ascendctl sends
(ascendctl.facts.build_gather_script with the preflight's parameters for each host), so
both do exactly the same work on the nodes. Wall-clock time of each whole command
(interpreter start-up included). Every run must reach every node (preflight: exit 0 on a
clean lab; Ansible: no failed/unreachable host). Results: a table on stdout and JSON in
bench/results/ (gitignored). Ansible comes from bench_play_vs_ansible.py's helpers
(ansible-core from PyPI in bench/.venv-ansible).

On this machine every lab node shares the same 2 CPUs and the simulated npu-smi /
hccn_tool are Python programs (~11 ms of CPU each): the node-side work of N nodes adds
up, so wall time grows with N even though the controller's part (connect, parse, check)
stays flat. The table shows both: the wall time and the controller's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
from result_files import save_results  # noqa: E402  (bench/ is on sys.path)

from bench_play_vs_ansible import (  # noqa: E402  (reused: install, inventory, timing)
    ANSIBLE_HOME, ensure_ansible, timed_ansible_playbook, write_ansible_inventory,
)

PLAYBOOKS = ANSIBLE_HOME / "preflight-playbooks"     # generated per run (gitignored)
TARGET_RATIO = 10.0
NPUSMI = "/usr/local/sbin/npu-smi"
HCCN = "/usr/local/bin/hccn_tool"
# the gather runs its commands with bash and never fails on a command's exit status
BASH = {"args": {"executable": "/bin/bash"}, "changed_when": False, "failed_when": False}
VARIANTS = {
    "defaults": {},
    "tuned": {"ANSIBLE_PIPELINING": "True", "ANSIBLE_GATHERING": "explicit"},
}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the gather commands, as ascendctl sends them --------------------------------------------

def gather_jobs(inv, host_name: str) -> list[tuple[str, str]]:
    """(section, shell command) of the gather script ascendctl builds for this host."""
    from ascendctl.facts import build_gather_script
    from ascendctl.preflight.plan import gather_params

    params = gather_params(inv, inv.host(host_name), play_hosts=[h.name for h in inv.hosts])
    script = build_gather_script(params)
    body = script[script.index("\nthrottle; run ") + 1:script.index("\nwait\n")]
    jobs = []
    for chunk in body.split("\nthrottle; run ")[0:]:
        words = shlex.split(chunk.removeprefix("throttle; run "))   # SECTION FILE CMD &
        assert len(words) == 4 and words[3] == "&", words
        jobs.append((words[0], words[2].replace('"$NPUSMI"', NPUSMI).replace('"$HCCN"', HCCN)))
    return jobs


def _raw(text: str) -> str:
    return "{% raw %}" + text + "{% endraw %}"


def write_ansible_playbooks(inv, size: int) -> tuple[Path, Path, dict[str, dict]]:
    """The per-command playbook, the one-script playbook, and host vars (ping targets)."""
    import yaml

    from ascendctl.preflight.owners import owners_script

    per_host = {h.name: gather_jobs(inv, h.name) for h in inv.hosts}
    head = inv.head.name
    static: list[tuple[str, str]] = []
    probes = None
    host_vars: dict[str, dict] = {}
    ping_template = dfping_template = None
    for name, jobs in per_host.items():
        # ping:<port>:<ip>
        pings = [j for j in jobs if j[0].startswith("ping:")]
        dfpings = [j for j in jobs if j[0].startswith("dfping:")]
        host_vars[name] = {"ping_targets": [[int(s.split(":")[1]), s.split(":", 2)[2]]
                                            for s, _ in pings]}
        if pings and ping_template is None:
            port, ip = host_vars[name]["ping_targets"][0]
            ping_template = _templated(pings[0][1], port, ip)
            dfping_template = _templated(dfpings[0][1], port, ip) if dfpings else None
        rest = [j for j in jobs if not j[0].startswith(("ping:", "dfping:", "probes"))]
        if not static:
            static = rest
        assert rest == static, f"{name}: the non-ping commands differ between hosts"
        probes = probes or next((c for s, c in jobs if s == "probes"), None)
    tasks = [{"name": "owners", "ansible.builtin.shell": _raw(owners_script("0" * 16)),
              "changed_when": False},
             {"name": "clock_start", "ansible.builtin.command": "date +%s.%N", "changed_when": False}]
    for section, command in static:
        tasks.append({"name": section, "ansible.builtin.shell": _raw(command), **BASH})
    if probes:
        tasks.append({"name": "probes", "ansible.builtin.shell": _raw(probes),
                      "when": f"inventory_hostname != '{head}'", **BASH})
    if ping_template:
        tasks.append({"name": "ping matrix", "ansible.builtin.shell": ping_template,
                      "loop": "{{ ping_targets }}", **BASH})
    if dfping_template:
        tasks.append({"name": "path MTU probes", "ansible.builtin.shell": dfping_template,
                      "loop": "{{ ping_targets }}", **BASH})
    tasks.append({"name": "clock_end", "ansible.builtin.command": "date +%s.%N", "changed_when": False})
    play = [{"name": "preflight facts, one task per command", "hosts": "nodes",
             "environment": {"LC_ALL": "C"}, "tasks": tasks}]
    PLAYBOOKS.mkdir(parents=True, exist_ok=True)
    header = ("# Generated by bench/bench_preflight.py from the gather script ascendctl sends "
              f"({size} nodes); the same commands, one Ansible task each.\n")
    per_command = PLAYBOOKS / f"preflight_{size}.ansible.yaml"
    per_command.write_text(header + yaml.safe_dump(play, sort_keys=False, width=120))
    script_play = [{"name": "preflight facts, the gather script as one task", "hosts": "nodes",
                    "tasks": [{"name": "gather script", "ansible.builtin.script":
                               "{{ playbook_dir }}/gather-{{ inventory_hostname }}.sh",
                               "args": {"executable": "/bin/bash"}, "changed_when": False}]}]
    one_script = PLAYBOOKS / f"preflight_{size}_script.ansible.yaml"
    one_script.write_text(yaml.safe_dump(script_play, sort_keys=False))
    return per_command, one_script, host_vars


def _templated(command: str, port: int, ip: str) -> str:
    """The command for (port, ip) with both replaced by the loop item; the rest raw."""
    marker_port, marker_ip = f"-i {port} ", ip
    parts = []
    for chunk in command.split(marker_ip):
        parts.append("{{ item[0] }} ".join(_raw(p) for p in chunk.split(marker_port))
                     .replace("{{ item[0] }} ", "-i {{ item[0] }} "))
    return "{{ item[1] }}".join(parts)


def write_gather_scripts(inv) -> None:
    from ascendctl.facts import build_gather_script
    from ascendctl.preflight.plan import gather_params

    for h in inv.hosts:
        params = gather_params(inv, h, play_hosts=[x.name for x in inv.hosts])
        (PLAYBOOKS / f"gather-{h.name}.sh").write_text(build_gather_script(params))


# -- runs ------------------------------------------------------------------------------------

def run_preflight(inventory: Path) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "preflight", "-i", str(inventory),
                           "--json"], capture_output=True, text=True, timeout=900, cwd=REPO)
    elapsed = time.monotonic() - started
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"ascendctl preflight: exit {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    if any(n["state"] != "ok" for n in report["nodes"]):
        raise SystemExit(f"ascendctl preflight: a node was not gathered: {report['nodes']}")
    return elapsed, report


def run_ansible(playbook_bin: Path, book: Path, inventory: Path, env_extra: dict[str, str],
                nodes: list[str]) -> tuple[float, int]:
    """Wall time and the fewest task results any node reported (forks = nodes)."""
    elapsed, recap = timed_ansible_playbook(
        playbook_bin, book, inventory, {"ANSIBLE_FORKS": str(len(nodes)), **env_extra}, nodes,
        timeout=3600)
    return elapsed, min(recap[n][0] for n in nodes)


def write_inventory_with_pings(lab, path: Path, host_vars: dict[str, dict]) -> None:
    import yaml

    write_ansible_inventory(lab, path)
    data = yaml.safe_load(path.read_text())
    for name, hv in data["all"]["children"]["nodes"]["hosts"].items():
        hv.update(host_vars[name])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


# -- main ------------------------------------------------------------------------------------

def bench_size(size: int, args, playbook_bin: Path) -> dict:
    from ascendctl.load import load_inventory
    from ascendctl_lab import Lab

    lab = Lab(f"{args.lab_prefix}{size}")
    say(f"[{size} nodes] bringing up lab {lab.name!r} ...")
    lab.up(nodes=size, npus_per_node=8, progress=lambda m: None)
    try:
        inv = load_inventory(lab.inventory_path)
        nodes = [n.name for n in lab.nodes]
        per_command, one_script, host_vars = write_ansible_playbooks(inv, size)
        write_gather_scripts(inv)
        ansible_inv = ANSIBLE_HOME / f"inventory-preflight-{size}.yaml"
        write_inventory_with_pings(lab, ansible_inv, host_vars)
        subprocess.run([sys.executable, "-m", "ascendctl", "--version"], capture_output=True)
        walls, inside, gathers, statuses, execs = [], [], [], [], None
        for i in range(args.runs):
            elapsed, report = run_preflight(lab.inventory_path)
            walls.append(elapsed)
            inside.append(report["duration_s"])
            gathers.append(max(n["gather_s"] for n in report["nodes"]))
            statuses.append(report["status"])
            execs = {n["name"]: n["remote_executions"] for n in report["nodes"]}
            say(f"[{size} nodes] ascendctl preflight run {i + 1}: {elapsed:.2f}s "
                f"({report['status']}, slowest gather {gathers[-1]:.2f}s)")
        row = {"nodes": size, "preflight_median_s": round(statistics.median(walls), 3),
               "preflight_runs_s": [round(w, 3) for w in walls],
               "preflight_in_run_s": round(statistics.median(inside), 3),
               "slowest_gather_s": round(statistics.median(gathers), 3),
               "controller_share_s": round(statistics.median(w - g for w, g in zip(walls, gathers)), 3),
               "preflight_status": statuses, "remote_executions": execs,
               "ansible_tasks_per_host": None, "ansible": {}}
        for variant in args.ansible_variants:
            elapsed, ok = run_ansible(playbook_bin, per_command, ansible_inv, VARIANTS[variant], nodes)
            row["ansible"][f"per-command ({variant})"] = round(elapsed, 3)
            row["ansible_tasks_per_host"] = ok
            say(f"[{size} nodes] ansible-playbook per command ({variant}): {elapsed:.2f}s, "
                f"{ok} task results per host")
        if args.script_variant:
            elapsed, _ = run_ansible(playbook_bin, one_script, ansible_inv, VARIANTS["tuned"], nodes)
            row["ansible"]["one script (tuned)"] = round(elapsed, 3)
            say(f"[{size} nodes] ansible-playbook, gather script as one task: {elapsed:.2f}s")
        ours = row["preflight_median_s"]
        row["ratios"] = {k: round(v / ours, 1) for k, v in row["ansible"].items()}
        return row
    finally:
        say(f"[{size} nodes] taking lab {lab.name!r} down ...")
        lab.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3, help="preflight runs per size (median)")
    parser.add_argument("--ansible-variants", nargs="*", default=list(VARIANTS),
                        choices=list(VARIANTS))
    parser.add_argument("--no-script-variant", dest="script_variant", action="store_false")
    parser.add_argument("--lab-prefix", default=f"pfb{os.getpid() % 10000}n")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root: the bench brings up its own labs (systemd-nspawn)", file=sys.stderr)
        return 2
    from ascendctl import __version__

    playbook_bin, ansible_version = ensure_ansible()
    rows = [bench_size(size, args, playbook_bin) for size in args.sizes]
    best = min((r["ratios"][k] for r in rows for k in r["ratios"] if k.startswith("per-command")),
               default=None)
    result = {
        "bench": "ascendctl preflight vs ansible-playbook running the same gather commands",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "python": platform.python_version(),
                    "loadavg_at_end": os.getloadavg()},
        "versions": {"ascendctl": __version__, "ansible-core": ansible_version},
        "rows": rows, "target_ratio": TARGET_RATIO,
        "lowest_ratio_vs_per_command_ansible": best,
        "target_met": best is not None and best >= TARGET_RATIO,
    }
    out = save_results("bench_preflight", result)

    print(f"\nascendctl preflight vs ansible-playbook, same gather commands, same lab nodes "
          f"({os.cpu_count()} CPUs shared by all nodes; ansible-core {ansible_version})")
    cols = sorted({k for r in rows for k in r["ansible"]})
    head = f"{'nodes':>5}  {'preflight s':>11}  {'controller s':>12}  {'execs/node':>10}"
    for c in cols:
        head += f"  {c:>28}"
    print(head)
    for r in rows:
        execs = sorted(set((r["remote_executions"] or {}).values()))
        line = (f"{r['nodes']:>5}  {r['preflight_median_s']:>11.2f}  {r['controller_share_s']:>12.2f}  "
                f"{','.join(map(str, execs)):>10}")
        for c in cols:
            value = r["ansible"].get(c)
            cell = f"{value:.1f} s = {r['ratios'][c]:.1f}x" if value else "-"
            line += f"  {cell:>28}"
        print(line)
    print("controller s: preflight wall time minus the slowest node's gather round trip "
          "(connect, start-up, parse, checks, report)")
    if best is not None:
        verdict = "met" if result["target_met"] else "NOT met"
        print(f"target >= {TARGET_RATIO:g}x faster than per-command Ansible: {verdict} "
              f"(lowest ratio {best:.1f}x)")
    print(f"results: {out}")
    return 0 if result["target_met"] or best is None else 1


if __name__ == "__main__":
    sys.exit(main())
