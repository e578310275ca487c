"""Booting, entering and stopping one node: systemd-nspawn in a cgroup of its own (the
host has no systemd; nodes started from one cgroup collide), over the shared image
layers with a writable overlay per node, in a network namespace prepared beforehand."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ascendctl_lab.hostcmd import LabError

CGROUP_HIERARCHIES = ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# One host directory of the lab, bound into every node here: what an NFS share is to a real
# PD site whose storage connector exchanges KV through files (`lab up --pd`).
SHARED_DIR = "/srv/lab-shared"


def cgroup_dirs(machine: str) -> list[Path]:
    dirs = [Path(h) / machine for h in CGROUP_HIERARCHIES if os.path.isdir(h)]
    if not dirs and os.path.exists("/sys/fs/cgroup/cgroup.procs"):
        dirs = [Path("/sys/fs/cgroup") / machine]
    return dirs


def nspawn_argv(machine: str, hostname: str, layers: list[Path], upper: Path,
                binds: tuple[tuple[Path, str], ...] = ()) -> list[str]:
    # --private-network (not --network-namespace-path): only then does the node's /sys
    # show its own interfaces. The host attaches a name to the new namespace and wires it.
    # `binds`: host directories mounted into the node (podman's storage must sit on a real
    # filesystem: overlay on the node's overlay root is refused).
    overlay = ":".join(str(p) for p in layers) + f":{upper}:/"
    return ["systemd-nspawn", "--quiet", "-D", str(layers[0]), f"--overlay={overlay}",
            f"--machine={machine}", f"--hostname={hostname}", "--register=no",
            "--keep-unit", "--private-network",
            "--resolv-conf=off", "--timezone=off", "--link-journal=no",
            "--console=read-only",
            *(f"--bind={source}:{target}" for source, target in binds), "-b"]


def start(machine: str, argv: list[str], log: Path) -> int:
    """Start nspawn detached, in its own cgroup; return the nspawn PID."""
    dirs = cgroup_dirs(machine)
    for directory in dirs:
        directory.mkdir(exist_ok=True)

    def enter_cgroup() -> None:
        for directory in dirs:
            with open(directory / "cgroup.procs", "w") as handle:
                handle.write(str(os.getpid()))

    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(argv, stdin=devnull, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=enter_cgroup, start_new_session=True, close_fds=True)
    return proc.pid


def is_our_nspawn(pid: int | None, machine: str) -> bool:
    """True if PID is alive and is the systemd-nspawn we started for MACHINE."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].endswith(b"systemd-nspawn") and \
        f"--machine={machine}".encode() in cmdline


def leader_pid(nspawn_pid: int | None) -> int | None:
    """The container's PID 1 (a child of the systemd-nspawn process)."""
    if not nspawn_pid:
        return None
    try:
        children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split()
    except OSError:
        return None
    # Until the container's init has exec'd, the children are nspawn's own helpers.
    for child in children:
        try:
            exe = os.readlink(f"/proc/{child}/exe")
        except OSError:
            continue
        if exe.endswith("/systemd"):
            return int(child)
    return None


def nsenter_argv(leader: int, argv: list[str]) -> list[str]:
    env = ["PATH=" + NODE_PATH, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", "USER=root",
           "LOGNAME=root"]
    return ["nsenter", "-t", str(leader), "-m", "-u", "-i", "-n", "-p", "-r", "-w",
            "--", "/usr/bin/env", "-i", *env, *argv]


def exec_in(leader: int, argv: list[str], *, check: bool = True, timeout: float | None = 60,
            input: str | bytes | None = None) -> subprocess.CompletedProcess:
    text = not isinstance(input, bytes)
    try:
        proc = subprocess.run(nsenter_argv(leader, argv), input=input, capture_output=True,
                              text=text, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise LabError(f"timed out after {timeout}s in node: {' '.join(argv)}") from err
    if check and proc.returncode != 0:
        raise LabError(f"node command failed ({proc.returncode}): {' '.join(argv)}: "
                       f"{str(proc.stderr).strip()[-600:]}")
    return proc


def wait_running(leader_fn, timeout: float = 90) -> str:
    """Wait until systemd inside says running/degraded; return the final state."""
    deadline = time.monotonic() + timeout
    state = "unknown"
    while time.monotonic() < deadline:
        leader = leader_fn()
        if leader:
            proc = subprocess.run(nsenter_argv(leader, ["systemctl", "is-system-running"]),
                                  capture_output=True, text=True, timeout=30)
            state = proc.stdout.strip() or state
            if state in ("running", "degraded"):
                return state
        time.sleep(0.3)
    raise LabError(f"node did not finish booting within {timeout:.0f}s (state: {state})")


def stop(nspawn_pid: int | None, machine: str, timeout: float = 30) -> None:
    """Power the node off cleanly, then make sure its nspawn is gone."""
    if nspawn_pid is None or not is_our_nspawn(nspawn_pid, machine):
        return
    leader = leader_pid(nspawn_pid)
    if leader:
        subprocess.run(nsenter_argv(leader, ["systemctl", "poweroff", "--no-block"]),
                       capture_output=True, timeout=30)
    if not wait_gone(nspawn_pid, machine, timeout):
        os.kill(nspawn_pid, signal.SIGTERM)
        if not wait_gone(nspawn_pid, machine, 10):
            os.kill(nspawn_pid, signal.SIGKILL)
            wait_gone(nspawn_pid, machine, 10)


def wait_gone(pid: int, machine: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_our_nspawn(pid, machine):
            return True
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        except ChildProcessError:
            pass
        time.sleep(0.2)
    return not is_our_nspawn(pid, machine)


def remove_cgroups(machine: str) -> None:
    for top in cgroup_dirs(machine):
        if not top.exists():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):
            try:
                directory.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass
