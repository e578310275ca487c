"""What this node's engine units are doing, in words the supervisor can act on.

systemd alone cannot tell a deploy's `systemctl stop` from "never started since boot": an
inactive unit whose stop succeeded is unloaded and shows no timestamps. The agent
therefore remembers, per unit and boot, whether it saw the unit run and whether it stopped
it itself; `classify` combines that memory with systemd's view:

    running       active
    starting      activating
    stopping      deactivating
    crashed       failed, or inactive with a Result other than success
    stopped       inactive after it ran in this boot: someone stopped it on purpose
    not-started   inactive and not seen running since the node booted
    missing       the unit is not installed

Standard library only (it also runs inside `ascendctl status`'s node call).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "MainPID", "ExecMainCode",
              "ExecMainStatus", "ExecMainStartTimestamp", "ActiveEnterTimestamp",
              "InactiveEnterTimestamp", "ControlGroup")
CLD_CODES = {"1": "exited", "2": "killed", "3": "dumped"}   # ExecMainCode (siginfo CLD_*)
SIGNALS = {1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 6: "ABRT", 7: "BUS", 8: "FPE", 9: "KILL",
           11: "SEGV", 13: "PIPE", 14: "ALRM", 15: "TERM"}
RUNNING, STARTING, STOPPING, CRASHED, STOPPED, NOT_STARTED, MISSING = (
    "running", "starting", "stopping", "crashed", "stopped", "not-started", "missing")
DOWN_STATES = (CRASHED, STOPPED, NOT_STARTED, MISSING)


@dataclass
class UnitShow:
    """`systemctl show` of one unit (timestamps as epoch seconds, None when unset)."""

    unit: str
    load: str = "unknown"
    active: str = "unknown"
    sub: str = ""
    result: str = ""
    main_pid: int = 0
    exit_code: str = ""          # exited / killed / dumped
    exit_status: int = 0         # the exit status, or the signal number
    started_at: Optional[float] = None
    active_since: Optional[float] = None
    inactive_since: Optional[float] = None
    cgroup: str = ""


@dataclass
class UnitMemory:
    """What the agent saw of one unit in one boot (kept across agent restarts)."""

    boot_id: str = ""
    seen_running: bool = False
    stopped_by_plan: Optional[int] = None     # the plan generation the agent stopped it for
    crashed_at: Optional[float] = None        # when the agent first saw it crashed
    crash: Optional[str] = None

    @classmethod
    def from_dict(cls, data: Any) -> "UnitMemory":
        if not isinstance(data, dict):
            return cls()
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass
class UnitState:
    unit: str
    state: str
    active: str
    sub: str
    result: str
    main_pid: int
    since: Optional[float]              # when it entered this state (epoch s), if known
    exit: Optional[str] = None          # "signal KILL", "status 2"
    active_for_s: Optional[float] = None
    stopped_by_plan: Optional[int] = None
    journal: Optional[str] = None       # the telling log line of a crash

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _timestamp(value: str) -> Optional[float]:
    value = value.strip()
    if not value.startswith("@"):
        return None
    try:
        return float(value[1:])
    except ValueError:
        return None


def parse_show(text: str, units: list[str]) -> dict[str, UnitShow]:
    """`systemctl show --timestamp=unix -p ... U1 U2 ...`: one blank-line separated block
    per unit, in the order asked."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.split("\n"):
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition("=")
        if sep:
            blocks[-1][key] = value
    blocks = [b for b in blocks if b]
    shows = {}
    for unit, values in zip(units, blocks):
        try:
            status = int(values.get("ExecMainStatus", "0") or 0)
        except ValueError:
            status = 0
        shows[unit] = UnitShow(
            unit=unit, load=values.get("LoadState", "unknown"),
            active=values.get("ActiveState", "unknown"), sub=values.get("SubState", ""),
            result=values.get("Result", ""),
            main_pid=int(values.get("MainPID", "0") or 0),
            exit_code=CLD_CODES.get(values.get("ExecMainCode", ""), ""),
            exit_status=status,
            started_at=_timestamp(values.get("ExecMainStartTimestamp", "")),
            active_since=_timestamp(values.get("ActiveEnterTimestamp", "")),
            inactive_since=_timestamp(values.get("InactiveEnterTimestamp", "")),
            cgroup=values.get("ControlGroup", ""))
    for unit in units:
        shows.setdefault(unit, UnitShow(unit=unit))
    return shows


def read_units(units: list[str]) -> dict[str, UnitShow]:
    if not units:
        return {}
    try:
        out = subprocess.run(["systemctl", "show", "--timestamp=unix",
                              *[f"--property={p}" for p in PROPERTIES], "--", *units],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return parse_show(out, units)


def describe_exit(show: UnitShow) -> Optional[str]:
    if show.exit_code in ("killed", "dumped"):
        name = SIGNALS.get(show.exit_status, str(show.exit_status))
        return f"signal {name}" + (" (core dumped)" if show.exit_code == "dumped" else "")
    if show.exit_code == "exited" and show.exit_status != 0:
        if 128 < show.exit_status <= 128 + 64:   # the launcher reports its engine's signal
            signum = show.exit_status - 128
            return f"status {show.exit_status}: engine killed by signal " \
                   f"{SIGNALS.get(signum, str(signum))}"
        return f"status {show.exit_status}"
    if show.result and show.result != "success":
        return show.result
    return None


def classify(show: UnitShow, memory: UnitMemory, boot_id: str,
             now: Optional[float] = None) -> UnitState:
    """One unit's state (see the module docstring). Pure."""
    now = time.time() if now is None else now
    same_boot = memory.boot_id == boot_id
    base = dict(unit=show.unit, active=show.active, sub=show.sub, result=show.result,
                main_pid=show.main_pid)
    if show.load in ("not-found", "masked") or (show.load != "loaded" and show.active == "unknown"):
        return UnitState(state=MISSING, since=None, **base)
    if show.active == "active":
        since = show.active_since
        return UnitState(state=RUNNING, since=since,
                         active_for_s=None if since is None else max(0.0, now - since), **base)
    if show.active in ("activating", "reloading"):
        return UnitState(state=STARTING, since=show.started_at, **base)
    if show.active == "deactivating":
        return UnitState(state=STOPPING, since=None, **base)
    crashed = show.active == "failed" or (show.result not in ("", "success"))
    if crashed:
        since = show.inactive_since or (memory.crashed_at if same_boot else None)
        return UnitState(state=CRASHED, since=since, exit=describe_exit(show) or show.result,
                         **base)
    if same_boot and memory.stopped_by_plan is not None:
        return UnitState(state=STOPPED, since=show.inactive_since, exit=None,
                         stopped_by_plan=memory.stopped_by_plan, **base)
    if same_boot and memory.crashed_at is not None:
        # it crashed and someone ran `systemctl reset-failed`: still not a clean stop
        return UnitState(state=CRASHED, since=memory.crashed_at, exit=memory.crash, **base)
    if same_boot and memory.seen_running:
        return UnitState(state=STOPPED, since=show.inactive_since, **base)
    return UnitState(state=NOT_STARTED, since=None, **base)


def remember(memory: UnitMemory, state: UnitState, boot_id: str, now: float) -> UnitMemory:
    """The memory after seeing `state` (pure)."""
    if memory.boot_id != boot_id:
        memory = UnitMemory(boot_id=boot_id)
    if state.state in (RUNNING, STARTING):
        return UnitMemory(boot_id=boot_id, seen_running=True)
    if state.state == CRASHED and memory.crashed_at is None:
        return UnitMemory(boot_id=boot_id, seen_running=memory.seen_running,
                          stopped_by_plan=memory.stopped_by_plan, crashed_at=state.since or now,
                          crash=state.exit)
    return memory


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def cgroup_pids(cgroup: str) -> set[int]:
    """PIDs in a unit's cgroup (cgroup v2, or the v1 name=systemd hierarchy)."""
    if not cgroup:
        return set()
    rel = cgroup.lstrip("/")
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        try:
            with open(os.path.join(base, rel, "cgroup.procs"), encoding="ascii") as handle:
                return {int(line) for line in handle if line.strip().isdigit()}
        except OSError:
            continue
    return set()


def pid_in_units(pid: int, units: list[str]) -> bool:
    """Whether /proc/PID/cgroup places the process in one of the units."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    return any(line.rstrip().endswith("/" + unit) or f"/{unit}/" in line
               for line in text.splitlines() for unit in units)


def engine_pids(shows: dict[str, UnitShow]) -> set[int]:
    pids: set[int] = set()
    for show in shows.values():
        pids |= cgroup_pids(show.cgroup)
        if show.main_pid:
            pids.add(show.main_pid)
    return pids


@dataclass
class NpuProcess:
    npu: int
    pid: int
    name: str
    mem_mb: Optional[int]
    engine: bool


@dataclass
class NpuHolders:
    """Who holds this node's NPUs: the engine's processes or foreign ones."""

    ok: bool
    error: str = ""
    processes: list[NpuProcess] = field(default_factory=list)

    @property
    def free(self) -> bool:
        return self.ok and not self.processes

    @property
    def foreign(self) -> list[NpuProcess]:
        return [p for p in self.processes if not p.engine]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "free": self.free,
                "processes": [asdict(p) for p in self.processes],
                "foreign": [asdict(p) for p in self.foreign]}


def npu_holders(table: Optional[list[tuple[int, int, str, Optional[int]]]], error: str,
                engine: set[int], units: list[str]) -> NpuHolders:
    """Classify npu-smi's process table ((npu, pid, name, MB) rows; None when npu-smi could
    not be read) against the engine's PIDs, falling back to /proc/PID/cgroup."""
    if table is None:
        return NpuHolders(ok=False, error=error)
    return NpuHolders(ok=True, processes=[
        NpuProcess(npu=npu, pid=pid, name=name, mem_mb=mem,
                   engine=pid in engine or pid_in_units(pid, units))
        for npu, pid, name, mem in table])


def listening(port: Optional[int]) -> Optional[bool]:
    """Whether something on this node listens on TCP PORT (from /proc/net/tcp{,6})."""
    if not port:
        return None
    wanted = f"{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A" and \
                            fields[1].rsplit(":", 1)[-1] == wanted:
                        return True
        except OSError:
            continue
    return False


def telling_line(lines: list[str]) -> Optional[str]:
    """The line of a unit's log that says why it died: an error of the engine, else the
    launcher's own account, else the last line that is not systemd's bookkeeping. Pure."""
    text = [line.strip() for line in lines if line.strip()]

    def systemd_own(line: str) -> bool:
        return line.split(" ", 1)[0].endswith(".service:") or \
            line.startswith(("Started ", "Starting ", "Stopped ", "Stopping "))

    candidates = [line for line in text if not systemd_own(line)
                  and " WARNING " not in line and not line.startswith(("File ", "^"))]
    for line in reversed(candidates):
        lowered = line.lower()
        if ("error" in lowered or "exception" in lowered) and "ascendctl-launcher:" not in line:
            return line[:300]
    for line in reversed(candidates):
        if "ascendctl-launcher:" in line:
            return line[:300]
    return candidates[-1][:300] if candidates else None


def journal_error(unit: str, lines: int = 60) -> Optional[str]:
    """The most telling recent log line of a unit (see telling_line)."""
    try:
        out = subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager",
                              "-o", "cat"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return telling_line(out.splitlines())


def secret_values(secrets_file: Optional[str]) -> list[str]:
    """Every value of the release's secrets.env (never published, even inside a log line)."""
    from ascendctl_runtime.nodeutil import parse_env_file

    if not secrets_file:
        return []
    try:
        with open(secrets_file, encoding="utf-8") as handle:
            return [v for v in parse_env_file(handle.read()).values() if len(v) >= 4]
    except OSError:
        return []


def redact(line: Optional[str], secrets: list[str]) -> Optional[str]:
    if line is None:
        return None
    for value in secrets:
        line = line.replace(value, "[REDACTED]")
    return line
