"""Start the serving engine for one rank, the way the release describes it.

    python3 -m ascendctl_runtime.launcher /var/lib/ascendctl/releases/<id>/engine.json

systemd has already applied the release's environment files. The launcher applies the
CPU/NUMA binding, starts the engine in its own process group, forwards signals to it,
and on stop gives it a grace period before killing the whole group — so a headless rank
and every worker it forked stop with the service instead of lingering on the NPUs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Optional

from ascendctl_runtime.contract import LaunchConfig

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1


def parse_cpu_list(spec: str) -> set[int]:
    """'0-3,8,10-11' → {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            if int(low) > int(high):
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"empty CPU list {spec!r}")
    return cpus


def engine_command(config: LaunchConfig) -> list[str]:
    """The argv to run, wrapped in numactl when a NUMA node is requested and available."""
    if config.numa_node is None:
        return list(config.argv)
    numactl = shutil.which("numactl")
    if numactl is None:
        log(f"numactl not found: NUMA node {config.numa_node} binding skipped")
        return list(config.argv)
    node = str(int(config.numa_node))
    return [numactl, f"--cpunodebind={node}", f"--membind={node}", *config.argv]


def _child_setup(cpus: Optional[set[int]]):
    def setup() -> None:
        os.setpgid(0, 0)
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            # If the launcher dies without forwarding a signal, the engine still gets one.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


def log(message: str) -> None:
    print(f"ascendctl-launcher: {message}", file=sys.stderr, flush=True)


class Supervisor:
    def __init__(self, config: LaunchConfig):
        self.config = config
        self.child: Optional[subprocess.Popen] = None
        self.stopping_since: Optional[float] = None
        self.group_killed = False

    def on_signal(self, signum: int, _frame) -> None:
        if self.child is None:
            sys.exit(128 + signum)
        if self.stopping_since is None:
            self.stopping_since = time.monotonic()
            log(f"received {signal.Signals(signum).name}; stopping rank {self.config.rank} "
                f"(grace {self.config.stop_grace_seconds:.0f}s)")
        try:
            os.killpg(self.child.pid, signum)
        except ProcessLookupError:
            pass

    def run(self) -> int:
        cpus = parse_cpu_list(self.config.cpus) if self.config.cpus else None
        argv = engine_command(self.config)
        role = "headless follower" if self.config.headless else "head"
        log(f"starting rank {self.config.rank} ({role}): {argv[0]} with {len(argv) - 1} "
            f"arguments" + (f", CPUs {self.config.cpus}" if cpus else ""))
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self.on_signal)
        try:
            self.child = subprocess.Popen(argv, cwd=self.config.workdir,
                                          preexec_fn=_child_setup(cpus))
        except OSError as err:
            log(f"cannot start {argv[0]}: {err}")
            return 127
        return self.wait()

    def wait(self) -> int:
        assert self.child is not None
        while True:
            try:
                code = self.child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if self.stopping_since is not None and not self.group_killed and \
                    time.monotonic() - self.stopping_since > self.config.stop_grace_seconds:
                log("grace period over; killing the engine's process group")
                self.kill_group()
        self.kill_group()  # workers the engine forked must not outlive it
        return self.exit_status(code)

    def exit_status(self, code: int) -> int:
        """What systemd sees. A stop that was asked for is a clean stop whatever the engine
        answered (Result=success: the supervisor leaves it alone); an engine that ends on
        its own is a failure even with status 0 (a server does not just exit), so the
        supervisor restarts the group."""
        if self.stopping_since is not None:
            if code != 0:
                log(f"rank {self.config.rank} stopped (engine status {code})")
            return 0
        if code == 0:
            log(f"rank {self.config.rank}: the engine exited on its own with status 0")
            return 1
        if code < 0:
            log(f"rank {self.config.rank}: the engine was killed by signal {-code}")
            return 128 + (-code)
        log(f"rank {self.config.rank}: the engine exited with status {code}")
        return code

    def kill_group(self) -> None:
        assert self.child is not None
        self.group_killed = True
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        config = LaunchConfig.load(args[0])
    except (OSError, ValueError) as err:
        log(f"bad launch config: {err}")
        return 2
    return Supervisor(config).run()


if __name__ == "__main__":
    sys.exit(main())
