"""The lab's engine faults on a node: `ascendctl lab fault NODE engine-slow | engine-garbage |
engine-leak | engine-stall [VALUE]`. Standard library only: `lab fault` copies this file to
the node (NODE_MODULE) and runs it there; ascendctl_lab.faults is the host's side.

Each fault takes effect at the engine's next start, never in a running engine:

- `lab fault` merges the kind into FAULT_FILE and adds a block to the sitecustomize of the
  node's Python (the one in its standard library directory, which every python3 of the
  node imports at start, the venvs made from it included: /opt/vllm, a venv engine's,
  the stand-in's). `lab heal` removes the block, FAULT_FILE and this file.
- At every interpreter start the block loads this module when FAULT_FILE exists, and
  `activate()` reads the faults once and acts only in the processes of the engine unit
  (their cgroup is ENGINE_UNIT's):
    * the launcher (`python -m ascendctl_runtime.launcher`, one per engine start) starts
      engine-slow's throttle, a process of its own beside the engine;
    * the engine's main process (the launcher's child: vLLM's API server; on a headless
      rank the headless main) starts engine-leak's thread;
    * every engine process patches Starlette when it imports it, for engine-garbage and
      engine-stall: only the API server serves HTTP with it (vLLM's EngineCore is
      spawned, a fresh interpreter that serves nothing).
  What they read is passed on in the environment (ENV), so processes the engine starts
  later act on the faults of its start, not on a later injection or heal.

Why not a cgroup CPU quota for engine-slow: the lab's nodes are nspawn containers on a
hybrid cgroup host; their v1 controllers are mounted read-only and the unified hierarchy
has no controller, so systemd's CPUQuota= (and cpu.max) has no effect there. The throttle
does what CFS bandwidth control does, from user space: a token bucket of CPU time
(refilled at the quota, burst BURST_S of it) over every process of the engine's cgroup,
stopped (SIGSTOP) while the bucket is empty and continued (SIGCONT) when it refills.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Set

FAULT_FILE = "/etc/ascendctl-lab/engine-faults.json"
NODE_DIR = "/usr/local/lib/ascendctl-lab-faults"
MODULE_NAME = "ascendctl_lab_engine_faults"
NODE_MODULE = f"{NODE_DIR}/{MODULE_NAME}.py"
ENV = "ASCENDCTL_LAB_ENGINE_FAULTS"
ENGINE_UNIT = "ascendctl-engine.service"
LAUNCHER_MODULE = "ascendctl_runtime.launcher"
KINDS = ("engine-slow", "engine-garbage", "engine-leak", "engine-stall")

COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
# What a garbled answer says instead: flagged by ascendctl.promotion.garbage.check_answer
# (U+FFFD at the start, not excused as a cut character) however short the answer.
GARBAGE_TEXT = "\ufffd\ufffd garbage garbage garbage"
GARBAGE_CHUNK = "\ufffd\ufffd garbage "          # each chunk of a streamed answer
STALL_TIMEOUT_S = 600.0
MIB = 1 << 20
LEAK_CAP_BYTES = 4 << 30
LEAK_STEP_S = 0.1
TICK_S = 0.01           # the throttle reads the engine's CPU time this often
BURST_S = 0.1           # CFS's default period: the bucket holds quota x this
REFRESH_S = 0.25        # the cgroup's processes re-read this often
SCOPE_MARK = "ascendctl_lab_engine_faults"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

HOOK_BEGIN = "# >>> ascendctl lab engine faults (`ascendctl lab heal` removes this block)\n"
HOOK_END = "# <<< ascendctl lab engine faults\n"
HOOK = HOOK_BEGIN + f'''def _ascendctl_lab_engine_faults():
    import os
    if not os.path.exists({NODE_MODULE!r}) or (
            {ENV!r} not in os.environ and not os.path.exists({FAULT_FILE!r})):
        return
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location({MODULE_NAME!r}, {NODE_MODULE!r})
    module = importlib.util.module_from_spec(spec)
    sys.modules[{MODULE_NAME!r}] = module
    spec.loader.exec_module(module)
    module.activate()


try:
    _ascendctl_lab_engine_faults()
except Exception as error:  # a lab fault must never keep a Python from starting
    import sys
    print("ascendctl lab engine faults:", repr(error), file=sys.stderr)
del _ascendctl_lab_engine_faults
''' + HOOK_END


def say(message: str) -> None:
    print(f"ascendctl lab fault: {message}", file=sys.stderr, flush=True)


# ---- which process is this ----------------------------------------------------------------

def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _cmdline(pid: str) -> List[str]:
    return [arg for arg in _read(f"/proc/{pid}/cmdline").split("\0") if arg]


def _is_launcher(argv: List[str]) -> bool:
    return any(a == "-m" and b == LAUNCHER_MODULE for a, b in zip(argv, argv[1:]))


def in_engine_unit(cgroup_text: str) -> bool:
    """Whether /proc/PID/cgroup's text puts the process in the engine unit (any
    hierarchy: name=systemd on the lab's hybrid nodes, the unified one elsewhere)."""
    return any(line.split(":", 2)[-1].rstrip("/").endswith("/" + ENGINE_UNIT)
               for line in cgroup_text.splitlines() if line.count(":") >= 2)


def engine_role(cgroup_text: str, argv: List[str], parent_argv: List[str]) -> Optional[str]:
    """None outside the engine unit; else `launcher`, `main` (the launcher's child: the
    engine's main process) or `child` (a process the engine started)."""
    if not in_engine_unit(cgroup_text):
        return None
    if _is_launcher(argv):
        return "launcher"
    return "main" if _is_launcher(parent_argv) else "child"


def load_config(environ: MutableMapping[str, str], path: str = FAULT_FILE) -> Dict[str, Any]:
    """The faults this process acts on: those its engine started with (ENV), else the
    fault file's."""
    text = environ.get(ENV)
    if text is None:
        text = _read(path)
    try:
        config = json.loads(text) if text else {}
    except ValueError:
        say(f"{path}: not JSON; no engine fault")
        return {}
    return {k: v for k, v in config.items() if k in KINDS} if isinstance(config, dict) else {}


def activate() -> None:
    """At interpreter start (the sitecustomize block): act on the faults in the engine's
    processes, do nothing in any other."""
    role = engine_role(_read("/proc/self/cgroup"), _cmdline("self"),
                       _cmdline(str(os.getppid())))
    if role is None:
        return
    config = load_config(os.environ)
    if not config:
        return
    os.environ[ENV] = json.dumps(config, sort_keys=True)
    if role == "launcher":
        slow = config.get("engine-slow")
        if slow:
            start_throttle(float(slow["cpu_percent"]))
        return
    acting = []
    if role == "main" and config.get("engine-leak"):
        start_leak(float(config["engine-leak"]["mib_per_s"]))
        acting.append(f"engine-leak {config['engine-leak']['mib_per_s']} MiB/s")
    garbage = config.get("engine-garbage")
    stall = config.get("engine-stall")
    if garbage or stall:
        faults = AsgiFaults(garbage=str(garbage["fraction"]) if garbage else None,
                            stall=int(stall["in_flight"]) if stall else None)
        patch_on_import("starlette.applications", lambda module: patch_asgi_class(
            module.Starlette, faults))
        if garbage:
            acting.append(f"engine-garbage {garbage['fraction']} of the completions")
        if stall:
            acting.append(f"engine-stall above {stall['in_flight']} completions in flight")
    if role == "main" and acting:
        say(f"PID {os.getpid()}: " + "; ".join(acting))


# ---- engine-garbage and engine-stall: around the API server's ASGI app ------------------

def garbage_schedule(fraction: str) -> Callable[[int], bool]:
    """Whether the n-th completion (from 1) is garbled: floor(n f) > floor((n-1) f) in exact
    arithmetic, so f = 0.02 is every 50th, and n requests hold floor(n f) garbled."""
    import math
    from fractions import Fraction

    share = Fraction(fraction)
    return lambda n: math.floor(n * share) > math.floor((n - 1) * share)


def garble(obj: Any, text: str, keep_empty: bool) -> bool:
    """Replace the answer text of every choice of a completion or chat completion (a
    response, or one chunk of a stream); KEEP_EMPTY leaves empty texts (a stream's role
    and finish chunks) as they are. Whether anything changed."""
    changed = False
    choices = obj.get("choices") if isinstance(obj, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        holders = [choice] + [choice[k] for k in ("message", "delta")
                              if isinstance(choice.get(k), dict)]
        for holder in holders:
            key = "text" if holder is choice else "content"
            if isinstance(holder.get(key), str) and (holder[key] or not keep_empty):
                holder[key] = text
                changed = True
    return changed


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def garble_json(body: bytes) -> bytes:
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    return _dumps(obj) if garble(obj, GARBAGE_TEXT, keep_empty=False) else body


def garble_events(data: bytes) -> bytes:
    """Server-sent events (each ends with a blank line): every `data:` line holding a
    chunk with answer text gets GARBAGE_CHUNK instead."""
    events = data.split(b"\n\n")
    for i, event in enumerate(events):
        lines = event.split(b"\n")
        for j, line in enumerate(lines):
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].lstrip(b" ")
            if not payload.startswith(b"{"):
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if garble(obj, GARBAGE_CHUNK, keep_empty=True):
                lines[j] = b"data: " + _dumps(obj)
        events[i] = b"\n".join(lines)
    return b"\n\n".join(events)


def _header(headers: List[Any], name: bytes) -> bytes:
    for key, value in headers:
        if bytes(key).lower() == name:
            return bytes(value).lower()
    return b""


class _Garbler:
    """A `send` that replaces the answer's text: a JSON response whole (its Content-Length
    recomputed), a stream event by event as they pass (no length to keep)."""

    def __init__(self, send: Send):
        self.send = send
        self.mode: Optional[str] = None
        self.start: Optional[Message] = None
        self.parts: List[bytes] = []
        self.pending = b""

    async def __call__(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            headers = list(message.get("headers", []))
            ctype = _header(headers, b"content-type")
            if message.get("status") == 200 and not _header(headers, b"content-encoding"):
                if ctype.startswith(b"text/event-stream"):
                    self.mode = "stream"
                elif ctype.startswith(b"application/json"):
                    self.mode, self.start = "json", message
                    return
            await self.send(message)
            return
        if kind != "http.response.body" or self.mode is None:
            await self.send(message)
            return
        body, more = bytes(message.get("body", b"")), bool(message.get("more_body", False))
        if self.mode == "json":
            self.parts.append(body)
            if more:
                return
            assert self.start is not None
            new = garble_json(b"".join(self.parts))
            headers = [(k, v) for k, v in self.start.get("headers", [])
                       if bytes(k).lower() != b"content-length"]
            headers.append((b"content-length", str(len(new)).encode()))
            await self.send({**self.start, "headers": headers})
            await self.send({"type": "http.response.body", "body": new, "more_body": False})
            return
        data = self.pending + body
        if more:
            cut = data.rfind(b"\n\n") + 2 if b"\n\n" in data else 0
            data, self.pending = data[:cut], data[cut:]
            if not data:
                return
        await self.send({"type": "http.response.body", "body": garble_events(data),
                         "more_body": more})


async def _read_request(receive: Receive) -> tuple[Receive, bytes]:
    """The request's body, and a `receive` that gives the app the same messages again."""
    messages: List[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request" or not message.get("more_body", False):
            break
    body = b"".join(bytes(m.get("body", b"")) for m in messages if m.get("type") == "http.request")

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()
    return replay, body


def is_probe(body: bytes) -> bool:
    """A request for one token (max_tokens 1): the deep probe of the gang supervisor and of
    `ascendctl status`. engine-stall neither counts nor hangs it."""
    try:
        request = json.loads(body)
    except ValueError:
        return False
    if not isinstance(request, dict):
        return False
    return any(type(request.get(k)) is int and request[k] == 1
               for k in ("max_tokens", "max_completion_tokens"))


class AsgiFaults:
    """engine-garbage and engine-stall around an ASGI app's HTTP requests; one per API
    server, counting completion requests (POST /v1/completions, /v1/chat/completions)
    since its start.

    garbage: the fraction f of completions whose answer text is replaced (the n-th when
    floor(n f) grows: f = 0.02 is every 50th); the others pass untouched, byte for byte.
    stall: N; a completion that arrives while N or more are being served hangs (no answer
    until its client goes away, or a 503 after stall_timeout_s). The hung ones are not
    counted as served, so a load of concurrency N + 1 leaves one request hanging for good
    and a load of N or less is served; one-token requests (the deep probes) are neither
    counted nor hung."""

    def __init__(self, garbage: Optional[str] = None, stall: Optional[int] = None,
                 stall_timeout_s: float = STALL_TIMEOUT_S):
        self.garbled_at = garbage_schedule(garbage) if garbage else None
        self.stall = stall
        self.stall_timeout_s = stall_timeout_s
        self.counted = 0        # completion requests since the start
        self.garbled = 0
        self.in_flight = 0      # completions being served (not the hung ones, not probes)
        self.hung = 0

    async def __call__(self, app: App, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get(SCOPE_MARK):
            await app(scope, receive, send)
            return
        scope[SCOPE_MARK] = True          # a Starlette app mounted inside does not count it again
        path = str(scope.get("path", "")).rstrip("/")
        if scope.get("method") != "POST" or path not in COMPLETION_PATHS:
            await app(scope, receive, send)
            return
        self.counted += 1
        if self.garbled_at is not None and self.garbled_at(self.counted):
            self.garbled += 1
            send = _Garbler(send)
        served = False
        if self.stall is not None:
            receive, body = await _read_request(receive)
            served = not is_probe(body)
            if served and self.in_flight >= self.stall:
                self.hung += 1
                try:
                    await self._hang(receive, send)
                finally:
                    self.hung -= 1
                return
        self.in_flight += served
        try:
            await app(scope, receive, send)
        finally:
            self.in_flight -= served

    async def _hang(self, receive: Receive, send: Send) -> None:
        import asyncio

        async def until_disconnect() -> None:
            while (await receive()).get("type") != "http.disconnect":
                pass
        try:
            await asyncio.wait_for(until_disconnect(), self.stall_timeout_s)
            return                      # the client went away: nobody to answer
        except asyncio.TimeoutError:
            pass
        body = _dumps({"error": {"message": f"lab fault engine-stall: no answer in "
                                            f"{self.stall_timeout_s:.0f} s",
                                 "type": "ServiceUnavailableError", "code": 503}})
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def patch_asgi_class(cls: Any, faults: AsgiFaults) -> None:
    """CLS's instances (Starlette's: FastAPI's __call__ calls it) pass every request through
    FAULTS first."""
    original = cls.__call__
    if getattr(original, SCOPE_MARK, False):
        return

    async def __call__(self: Any, scope: Scope, receive: Receive, send: Send) -> None:
        async def app(s: Scope, r: Receive, se: Send) -> None:
            await original(self, s, r, se)
        await faults(app, scope, receive, send)

    setattr(__call__, SCOPE_MARK, True)
    cls.__call__ = __call__


class _PatchOnImport:
    """A meta path finder: once NAME is imported (by whatever finder has it), PATCH(module)."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            self.patch(module)
        loader.exec_module = exec_module
        return spec


def patch_on_import(name: str, patch: Callable[[Any], None]) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


# ---- engine-leak -------------------------------------------------------------------------

_HELD: List[bytearray] = []


def leak(mib_per_s: float, cap_bytes: int = LEAK_CAP_BYTES, step_s: float = LEAK_STEP_S,
         held: Optional[List[bytearray]] = None) -> None:
    """Allocate MIB_PER_S MiB a second in steps of STEP_S, every page written (the host's
    RSS grows), kept in HELD, until CAP_BYTES are held."""
    held = _HELD if held is None else held
    per_step = max(1, int(mib_per_s * MIB * step_s))
    total = sum(len(b) for b in held)
    due = time.monotonic()
    while total < cap_bytes:
        size = min(per_step, cap_bytes - total)
        held.append(bytearray(b"\xa5") * size)
        total += size
        due += step_s
        time.sleep(max(0.0, due - time.monotonic()))


def start_leak(mib_per_s: float) -> None:
    import threading

    # a process forked from this one does not inherit the leak (nor its memory)
    os.register_at_fork(after_in_child=_HELD.clear)
    threading.Thread(target=leak, args=(mib_per_s,), name="ascendctl-lab-leak",
                     daemon=True).start()


# ---- engine-slow -------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU time of process PID (all its threads), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[-1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _signal(pids: Set[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class Throttle:
    """Hold the processes MEMBERS() names to CPU_PERCENT % of one CPU together: a token
    bucket of CPU seconds refilled at the quota (at most BURST_S of it held); while it is
    empty they are stopped. CPU time used before the first reading is not counted; a
    process that appears later counts from its start."""

    def __init__(self, cpu_percent: float, members: Callable[[], Set[int]],
                 tick_s: float = TICK_S, refresh_s: float = REFRESH_S):
        self.quota = cpu_percent / 100.0
        self.cap = max(self.quota * BURST_S, 1.0 / _CLK_TCK)
        self.members = members
        self.tick_s, self.refresh_s = tick_s, refresh_s
        self.stopped: Set[int] = set()
        self.stops = 0

    def run(self, keep_going: Callable[[], bool]) -> None:
        import signal

        known: Dict[int, float] = {}
        first, credit = True, self.cap
        last = refreshed = time.monotonic()
        refreshed -= self.refresh_s
        try:
            while keep_going():
                now = time.monotonic()
                if now - refreshed >= self.refresh_s:
                    pids = self.members()
                    for pid in pids - known.keys():
                        known[pid] = (cpu_seconds(pid) or 0.0) if first else 0.0
                    for pid in set(known) - pids:
                        known.pop(pid)
                        self.stopped.discard(pid)
                    if self.stopped:            # one that came while they are stopped
                        _signal(pids - self.stopped, signal.SIGSTOP)
                        self.stopped |= pids
                    first, refreshed = False, now
                used = 0.0
                for pid, before in list(known.items()):
                    seconds = cpu_seconds(pid)
                    if seconds is None:
                        known.pop(pid)
                        self.stopped.discard(pid)
                        continue
                    used += max(0.0, seconds - before)
                    known[pid] = seconds
                credit = min(self.cap, credit + self.quota * (now - last)) - used
                last = now
                if credit < 0 and not self.stopped:
                    self.stopped = set(known)
                    self.stops += 1
                    _signal(self.stopped, signal.SIGSTOP)
                elif credit >= 0 and self.stopped:
                    _signal(self.stopped, signal.SIGCONT)
                    self.stopped = set()
                time.sleep(self.tick_s)
        finally:
            _signal(self.stopped, signal.SIGCONT)
            self.stopped = set()


def own_cgroup_dir(pid: int) -> Optional[str]:
    """The directory of PID's cgroup as this node mounts it (name=systemd on the lab's
    hybrid nodes, else the unified hierarchy): /proc/PID/cgroup names the host's path, a
    container sees only its tail, so the longest tail whose cgroup.procs holds PID."""
    for line in _read(f"/proc/{pid}/cgroup").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "name=systemd":
            roots = ["/sys/fs/cgroup/systemd"]
        elif number == "0":
            roots = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for root in roots:
            for i in range(len(parts)):
                directory = os.path.join(root, *parts[i:])
                if str(pid) in _read(f"{directory}/cgroup.procs").split():
                    return directory
    return None


def cgroup_members(directory: str, exclude: Set[int]) -> Callable[[], Set[int]]:
    def members() -> Set[int]:
        return {int(p) for p in _read(f"{directory}/cgroup.procs").split()
                if p.isdigit()} - exclude
    return members


_THROTTLE: List[Any] = []


def start_throttle(cpu_percent: float) -> None:
    """From the launcher: the throttle as a process of its own in the engine's cgroup
    (stopped with the unit), which leaves the launcher alone and ends with it."""
    import subprocess

    _THROTTLE.append(subprocess.Popen(
        [sys.executable, "-I", "-S", os.path.abspath(__file__), "throttle",
         repr(cpu_percent), str(os.getpid())],
        stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True))


def throttle_main(cpu_percent: float, launcher: int) -> int:
    import signal

    directory = own_cgroup_dir(os.getpid())
    if directory is None:
        say("engine-slow: no cgroup of the engine found; the engine runs unthrottled")
        return 1
    stop: List[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: stop.append(n))
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)     # on time even when the CPUs are busy
    except OSError:
        pass
    say(f"engine-slow: the engine's processes held to {cpu_percent:g} % of one CPU "
        f"(PID {os.getpid()}, cgroup {directory})")
    Throttle(cpu_percent, cgroup_members(directory, {os.getpid(), launcher})).run(
        lambda: not stop and os.getppid() == launcher)
    return 0


# ---- the node's commands (`lab fault`, `lab heal`) ----------------------------------------

def sitecustomize_path() -> str:
    import sysconfig

    return os.path.realpath(os.path.join(sysconfig.get_path("stdlib"), "sitecustomize.py"))


def _write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.ascendctl-lab.new"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def without_hook(text: str) -> str:
    begin = text.find(HOOK_BEGIN)
    if begin < 0:
        return text
    end = text.find(HOOK_END, begin)
    return text[:begin] + (text[end + len(HOOK_END):] if end >= 0 else "")


def install_hook(path: str) -> None:
    text = without_hook(_read(path))
    if text and not text.endswith("\n"):
        text += "\n"
    _write(path, text + HOOK)


def uninstall_hook(path: str) -> None:
    text = _read(path)
    if HOOK_BEGIN not in text:
        return
    rest = without_hook(text)
    if rest.strip():
        _write(path, rest)
    else:
        os.unlink(path)


def add(kind: str, params: Dict[str, Any], path: str = FAULT_FILE) -> Dict[str, Any]:
    config = load_config({}, path)
    config[kind] = params
    _write(path, json.dumps(config, indent=1, sort_keys=True) + "\n")
    install_hook(sitecustomize_path())
    return config


def uninstall(path: str = FAULT_FILE) -> None:
    uninstall_hook(sitecustomize_path())
    for name in (path, path + ".ascendctl-lab.new"):
        if os.path.exists(name):
            os.unlink(name)
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def main(argv: List[str]) -> int:
    if argv[:1] == ["add"] and len(argv) == 3 and argv[1] in KINDS:
        config = add(argv[1], json.loads(argv[2]))
        print(json.dumps(config, sort_keys=True))
        return 0
    if argv == ["uninstall"]:
        uninstall()
        return 0
    if argv[:1] == ["throttle"] and len(argv) == 3:
        return throttle_main(float(argv[1]), int(argv[2]))
    print(f"usage: {MODULE_NAME}.py add KIND JSON | uninstall | throttle PERCENT LAUNCHER_PID",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
