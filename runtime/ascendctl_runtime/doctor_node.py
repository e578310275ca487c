"""A node's half of `ascendctl doctor` (standard library only; sent over SSH, one run per
node): collects logs and state into {relative path: text} and prints it as one JSON.

    journal/<unit>.log      the ascendctl units' journals (engine logs and systemd's own
                            messages about the units), --since
    kernel/kernel.log       kernel messages (journalctl -k, else dmesg)
    plog/<dir>/<file>       tails of the newest HCCL/CANN plog/slog files (~/ascend/log,
                            /var/log/npu, $ASCEND_PROCESS_LOG_PATH), modified since
    npu/npu-smi-info.txt    `npu-smi info`; npu/hccn-port-N.txt: link, net_health, TLS
    state/...               current release, releases, history tail, unit states,
                            listening ports, the current release's non-secret files

Secrets never leave the node: secrets.env is never read into the bundle, and every value
found in any release's secrets.env (and anything shaped like an API key argument or a
Bearer token) is replaced by [REDACTED] in every collected text.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from ascendctl_runtime.nodeutil import answer_call, parse_env_file, tail_file

REDACTED = "[REDACTED]"
SECRET_FILE = "secrets.env"
# Secrets are redacted even when their value is unknown here: by the name in front of
# them (any spelling: --api-key K, api_key=K, "api_key": "K", x-api-key: K,
# export VLLM_API_KEY="K", token=K, password: K, ...), by the Authorization header, and by
# their shape (sk-..., Bearer ..., hf_..., JWTs, URL passwords). A name must END with the
# secret word, so max_tokens=128, --max-num-batched-tokens 4096, tokenizer: /x and
# password_file=/run/x stay.
_SECRET_WORD = (r"(?:api[_-]?key|apikey|token|secret|password|passwd|passphrase|"
                r"credentials?|access[_-]?key|secret[_-]?key|private[_-]?key|auth)")
_NAME = r"(?<![A-Za-z0-9_])(?:[A-Za-z0-9]+[_.-])*" + _SECRET_WORD + r"(?![A-Za-z0-9_])"
_VALUE = (r"(?:\"(?P<dq>[^\"\n]+)\"|'(?P<sq>[^'\n]+)'"
          r"|(?P<bare>(?!\[REDACTED\])[^\s\x00\"',;&)}\]]+))")
SECRET_PATTERNS = (
    # Authorization: Bearer K / "Authorization": "Basic K" / Proxy-Authorization
    re.compile(r"(?P<pre>(?<![A-Za-z0-9_-])(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*"
               r"[\"']?(?:bearer|basic|token)[ \t]+)(?P<bare>(?!\[REDACTED\])[^\s\x00\"',;]+)",
               re.IGNORECASE),
    # --api-key K, --api-key "K", --api-key=K, ["--api-key", "K"] (argv, ps, JSON argv)
    re.compile(r"(?P<pre>--?" + _NAME + r"(?:[= ]+|[\"']\s*,\s*(?=[\"'])))" + _VALUE,
               re.IGNORECASE),
    # name=K, name: K, "name": "K", 'name': 'K', export NAME="K", ?name=K, NAME=K\0 (environ)
    re.compile(r"(?P<pre>" + _NAME + r"[\"']?[ \t]*[=:][ \t]*)" + _VALUE, re.IGNORECASE),
    # shapes, wherever they are
    re.compile(r"(?P<pre>(?<![A-Za-z0-9])Bearer\s+)(?P<bare>(?!\[REDACTED\])"
               r"[A-Za-z0-9._~+/=-]{8,})"),
    re.compile(r"(?P<pre>)(?P<bare>(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{8,})"),
    re.compile(r"(?P<pre>)(?P<bare>(?<![A-Za-z0-9_])(?:hf|gh[pousr])_[A-Za-z0-9]{20,})"),
    re.compile(r"(?P<pre>)(?P<bare>(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\."
               r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),
    re.compile(r"(?P<pre>[a-z][a-z0-9+.-]*://[^/\s:@\"']+:)(?P<bare>(?!\[REDACTED\])"
               r"[^/\s@\"']+)(?=@)", re.IGNORECASE),
)
_VALUE_GROUPS = ("dq", "sq", "bare")


def _redact_match(match: "re.Match[str]") -> str:
    text = match.group(0)
    for name in _VALUE_GROUPS:
        if name in match.re.groupindex and match.group(name) is not None:
            start, end = match.span(name)
            base = match.start()
            if match.group(name) == REDACTED:
                return text
            return text[:start - base] + REDACTED + text[end - base:]
    return text


RELEASE_FILES = ("engine.json", "ray.json", "engine.env", "hccl.json", "watchdog.json",
                 ".status", ".meta.json")
PLOG_DIRS = ("~/ascend/log", "/root/ascend/log", "/var/log/npu")
HCCN_TOOL = ("/usr/local/Ascend/driver/tools/hccn_tool", "hccn_tool")
NPU_SMI = ("npu-smi", "/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")


def _run(argv: list[str], timeout: float = 30.0) -> tuple[Optional[int], str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found\n"
    except subprocess.TimeoutExpired as err:
        return None, (err.stdout or b"").decode("utf-8", "replace") + \
            f"\n[ascendctl: {argv[0]} timed out after {timeout:g} s]\n"
    return done.returncode, done.stdout.decode("utf-8", "replace")


def _read(path: str, limit: int = 4_000_000) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _current(root: str) -> Optional[str]:
    try:
        return os.path.basename(os.readlink(os.path.join(root, "current")).rstrip("/"))
    except OSError:
        return None


def _releases(root: str) -> list[str]:
    base = os.path.join(root, "releases")
    try:
        return sorted(n for n in os.listdir(base) if not n.startswith("."))
    except OSError:
        return []


def known_secrets(root: str) -> list[str]:
    """Every value of every release's secrets.env (the key may differ per release)."""
    found = set()
    for release in _releases(root):
        text = _read(os.path.join(root, "releases", release, SECRET_FILE))
        if text:
            found.update(v for v in parse_env_file(text).values() if len(v) >= 4)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(_redact_match, text)
    return text


class Collector:
    def __init__(self, root: str, since_s: int, max_lines: int, max_bytes: int):
        self.root, self.since_s = root, since_s
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self.files: dict[str, str] = {}
        self.commands: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.total = 0

    def add(self, rel: str, text: str, argv: Optional[list[str]] = None,
            rc: Optional[int] = None) -> None:
        room = self.max_bytes - self.total
        if room <= 0:
            self.notes.append(f"{rel}: left out, the node's {self.max_bytes} byte budget is used")
            return
        if len(text) > room:
            text = text[-room:]
            self.notes.append(f"{rel}: cut to its last {room} bytes (budget)")
        self.files[rel] = text
        self.total += len(text)
        if argv is not None:
            self.commands[rel] = {"argv": argv, "rc": rc}

    def command(self, rel: str, argv: list[str], timeout: float = 30.0) -> tuple[Optional[int], str]:
        rc, out = _run(argv, timeout)
        self.add(rel, out, argv, rc)
        return rc, out

    # -- what is collected ---------------------------------------------------------------

    def journals(self, units: list[str]) -> None:
        since = f"--since=-{self.since_s}s"
        for unit in units:
            self.command(f"journal/{unit}.log",
                         ["journalctl", "-u", unit, since, "-o", "short-iso-precise",
                          "--no-pager", "-q", "-n", str(self.max_lines)], timeout=60)

    def kernel(self) -> None:
        since = f"--since=-{self.since_s}s"
        rc, out = _run(["journalctl", "-k", since, "-o", "short-iso-precise", "--no-pager",
                        "-q", "-n", str(self.max_lines)], 60)
        argv = ["journalctl", "-k", since]
        if rc != 0 or not out.strip():
            # Containers and some hosts keep no kernel messages in the journal.
            tried = f"# journalctl -k {since}: exit {rc}, {len(out.splitlines())} lines\n"
            rc, out = _run(["dmesg", "--ctime", "--nopager"], 30)
            out = tried + "\n".join(out.splitlines()[-self.max_lines:]) + "\n"
            argv = ["dmesg", "--ctime"]
        self.add("kernel/kernel.log", out, argv, rc)

    def plogs(self, extra_dirs: list[str], max_files: int = 40) -> None:
        cutoff = time.time() - self.since_s
        seen = set()
        for raw in list(PLOG_DIRS) + extra_dirs:
            base = os.path.realpath(os.path.expanduser(raw))
            if base in seen or not os.path.isdir(base):
                continue
            seen.add(base)
            found = []
            for directory, _dirs, names in os.walk(base):
                for name in names:
                    path = os.path.join(directory, name)
                    try:
                        mtime = os.path.getmtime(path)
                    except OSError:
                        continue
                    if mtime >= cutoff and os.path.isfile(path) and not os.path.islink(path):
                        found.append((mtime, path))
            found.sort(reverse=True)
            if len(found) > max_files:
                self.notes.append(f"{base}: {len(found)} log files changed since; kept the "
                                  f"newest {max_files}")
            label = base.strip("/").replace("/", "_")
            for _mtime, path in found[:max_files]:
                rel = os.path.relpath(path, base)
                try:
                    self.add(f"plog/{label}/{rel}", tail_file(path, self.max_lines, 4_000_000))
                except OSError as err:
                    self.notes.append(f"{path}: {err.strerror}")

    def npu(self, ports: int) -> None:
        smi = next((p for p in NPU_SMI if "/" not in p or os.path.exists(p)), "npu-smi")
        self.command("npu/npu-smi-info.txt", [smi, "info"])
        tool = next((p for p in HCCN_TOOL if "/" not in p or os.path.exists(p)), "hccn_tool")
        queries = [(port, what) for port in range(ports)
                   for what in ("-link", "-net_health", "-tls")]
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda q: _run([tool, "-i", str(q[0]), q[1], "-g"], 20),
                                    queries))
        for port in range(ports):
            parts = [f"$ hccn_tool -i {port} {what} -g   (exit {rc})\n{out}"
                     for (p, what), (rc, out) in zip(queries, answers) if p == port]
            self.add(f"npu/hccn-port-{port}.txt", "".join(parts))

    def state(self, units: list[str]) -> None:
        current = _current(self.root)
        self.add("state/current.txt", f"{current or '(none)'}\n")
        releases = []
        for release in _releases(self.root):
            directory = os.path.join(self.root, "releases", release)
            status = (_read(os.path.join(directory, ".status")) or "unknown").strip()
            meta = _read(os.path.join(directory, ".meta.json"))
            try:
                meta_data = json.loads(meta) if meta else {}
            except ValueError:
                meta_data = {}
            releases.append({"id": release, "status": status, "current": release == current,
                             "created": meta_data.get("created"), "by": meta_data.get("by")})
        self.add("state/releases.json", json.dumps(releases, indent=1) + "\n")
        history = _read(os.path.join(self.root, "history.jsonl"))
        if history is not None:
            self.add("state/history.jsonl", "\n".join(history.splitlines()[-300:]) + "\n")
        if units:
            self.command("state/units.txt", ["systemctl", "status", "--no-pager", "-l", "-n",
                                             "0", *units])
        self.command("state/ports.txt", ["ss", "-ltnp"])
        if current:
            directory = os.path.join(self.root, "releases", current)
            for name in RELEASE_FILES:
                text = _read(os.path.join(directory, name))
                if text is not None:
                    self.add(f"state/release/{name}", text)
            unit_dir = os.path.join(directory, "units")
            if os.path.isdir(unit_dir):
                for name in sorted(os.listdir(unit_dir)):
                    text = _read(os.path.join(unit_dir, name))
                    if text is not None:
                        self.add(f"state/release/units/{name}", text)

    def process_log_dirs(self) -> list[str]:
        """$ASCEND_PROCESS_LOG_PATH from the environment and the current release's engine.env."""
        dirs = [os.environ.get("ASCEND_PROCESS_LOG_PATH", "")]
        current = _current(self.root)
        if current:
            env = _read(os.path.join(self.root, "releases", current, "engine.env")) or ""
            dirs.append(parse_env_file(env).get("ASCEND_PROCESS_LOG_PATH", ""))
        return [d for d in dirs if d]


def op_collect(root: str, units: list[str], since_s: int, ports: int,
               max_lines: int = 20000, max_bytes: int = 48_000_000) -> dict[str, Any]:
    started = time.time()
    collector = Collector(root, int(since_s), int(max_lines), int(max_bytes))
    collector.journals(units)
    collector.kernel()
    collector.plogs(collector.process_log_dirs())
    collector.npu(int(ports))
    collector.state(units)
    secrets = known_secrets(root)
    files = {rel: redact(text, secrets) for rel, text in collector.files.items()}
    return {
        "hostname": socket.gethostname(),
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "since_s": int(since_s),
        "seconds": round(time.time() - started, 3),
        "files": files,
        "commands": collector.commands,
        "notes": collector.notes,
        "redacted_values": len(secrets),
    }


OPERATIONS = {"collect": op_collect}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)
