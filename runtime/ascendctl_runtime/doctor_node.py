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
found in any release's secrets.env (as it is, JSON-escaped or URL-encoded), and anything
shaped like a secret whatever its value (SECRET_RULES), is replaced by [REDACTED] in every
collected text.
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

from ascendctl_runtime import layout
from ascendctl_runtime.nodeutil import answer_call, parse_env_file, tail_file

REDACTED = "[REDACTED]"
SECRET_FILE = layout.SECRETS_ENV

# -- redaction ---------------------------------------------------------------------------
# Secrets are redacted even when their value is unknown here: by the name in front of
# them (any spelling: --api-key K, --api_key K, --api-k K, api_key=K, "api_key": "K",
# {'api_key': ['K']}, x-api-key: K, export VLLM_API_KEY="K", token=K&, api_key%3DK,
# {\"token\": \"K\"}, <api_key>K<, ...), by the Authorization and Cookie headers, and by
# their shape (sk-..., Bearer ..., Basic ..., hf_..., ghp_..., AKIA..., JWTs, URL
# userinfo, private key blocks). A name must END with the secret word, so max_tokens=128,
# --max-num-batched-tokens 4096, tokenizer: /x and password_file=/run/x stay.
#
# Every rule is linear in the length of the text: it starts at a literal (a secret word,
# `--`, `://`, `Bearer`, `sk-`, ...), a boundary is checked by a fixed-width lookbehind
# placed after that literal, and every run of characters either ends the rule or is
# followed by a character the run cannot hold, so an attempt that fails costs only its own
# run and two attempts never scan the same run (tests/unit/test_secret_scan_linear.py).
# Rules marked `folded` match the ASCII-lowercased text (case-insensitive without
# re.IGNORECASE, which makes alternations of words several times slower).

_WORDS = (r"api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|token|secret|password"
          r"|passwd|passphrase|credentials?|auth")
_END = r"(?![a-z0-9_])"
_QUOTE = r"(?:b?\\{0,4}[\"'`]|%2[27]|&quot;|&#3[49];)"      # plain, escaped, encoded
_SPACE = r"(?:[ \t]|%20){0,64}"        # bounded: a long run of blanks costs nothing
_SEP = r"(?:=>|:=|[=:>]|%3[ad])"
# the value: a list ['K1', 'K2'] whole, else one quoted or bare word (not `--next-option`,
# not `{...}`: a reference such as {'env': 'VAR'} is no secret)
_WORD_VALUE = (r"(?P<value>(?!--)[^\s\x00\"'`,;&<>{}\[\]\\%]"
               r"(?:[^\s\x00\"'`,;&<>{}\[\]\\%]|%(?!2[02367]|3b))*)")
_LIST_VALUE = r"\[(?P<list>(?!\[?redacted\])[^\]\n]+)"
# an optional quote that, once there, is never given back (a quote taken for the value's
# first character would make `b'[REDACTED]'` redact its `b`): a lookahead captures it
_OPEN = r"(?=(?P<open>" + _QUOTE + r"?))(?P=open)"
_VALUE = r"(?:" + _LIST_VALUE + r"|" + _OPEN + _WORD_VALUE + r")"
# an option starts a word: the dash is at the start or after a space, quote, [ ( , or =
# ...and its name ends with a secret word or is a prefix vLLM expands to --api-key/--hf-token
_OPTION = (r"-(?<![^\s\"'\[(,=]-)-?(?:[a-z0-9]+[_.-])*(?:" + _WORDS
           + r"|api[_-]k(?:ey?)?|hf[_-]t(?:o(?:k(?:en?)?)?)?)" + _END)
_SCHEME_WORD = (r"(?:bearer|basic|token|digest|negotiate|ntlm|apikey|api-key|key|jwt)"
                r"(?:[ \t]+|%20|\+)")
# the scheme, if there is one, is never taken for the value (`Bearer [REDACTED]` stays)
_SCHEME = r"(?:(?=" + _SCHEME_WORD + r")" + _SCHEME_WORD + r"|(?!" + _SCHEME_WORD + r"))"


class _Rule:
    def __init__(self, pattern: str, folded: bool):
        self.pattern, self.folded = re.compile(pattern), folded


SECRET_RULES = (
    # Authorization: Bearer K / "Authorization": "Basic K" / Proxy-Authorization: K
    _Rule(r"authorization" + _END + _QUOTE + "?" + _SPACE + _SEP + _SPACE + _OPEN
          + _SCHEME + r"(?:" + _LIST_VALUE + r"|" + _WORD_VALUE + r")", folded=True),
    # Cookie: a=1; session=K / Set-Cookie: session=K; Path=/  (every cookie, to the line end)
    _Rule(r"cookie" + _END + _QUOTE + "?" + _SPACE + _SEP + _SPACE + _QUOTE + "?"
          + r"(?P<value>(?!\[redacted\])[^\s\x00\"'`\\][^\r\n\x00\"'`\\]*)", folded=True),
    # --api-key K, --api-key=K, --api_key 'K', --api-k K, ["--api-key", "K"] (argv, ps, JSON)
    _Rule(_OPTION + r"(?:" + _QUOTE + r"?[ \t]{0,64},[ \t]{0,64}|" + _QUOTE + r"?[ \t]{1,64}|=)"
          + _VALUE,
          folded=True),
    # name=K, name: K, "name": "K", NAME=K\0 (environ), export NAME='K', ?name=K&, name%3DK
    _Rule("(?:" + _WORDS + ")" + _END + _QUOTE + "?" + _SPACE + _SEP + _SPACE + _VALUE, folded=True),
    # shapes, wherever they are
    _Rule(r"bearer(?<![a-z0-9]bearer)(?:[ \t]+|%20)(?P<value>(?!\[redacted\])"
          r"[a-z0-9._~+/=-]{8,})", folded=True),
    _Rule(r"basic(?<![a-z0-9]basic)(?:[ \t]+|%20)(?=[a-z0-9+/]*[0-9+/=])"
          r"(?P<value>[a-z0-9+/]{8,}={0,2})", folded=True),
    _Rule(r"(?P<value>sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{8,})", folded=False),
    _Rule(r"(?P<value>hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{20,})", folded=False),
    _Rule(r"(?P<value>gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{20,})", folded=False),
    _Rule(r"(?P<value>github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{20,})",
          folded=False),
    _Rule(r"(?P<value>glpat-(?<![A-Za-z0-9_]glpat-)[A-Za-z0-9_-]{20,})", folded=False),
    _Rule(r"(?P<value>xox[abposr]-(?<![A-Za-z0-9_]xox[abposr]-)[A-Za-z0-9-]{10,})",
          folded=False),
    _Rule(r"(?P<value>A[KS]IA(?<![A-Za-z0-9_]A[KS]IA)[0-9A-Z]{16})(?![0-9A-Za-z])",
          folded=False),
    _Rule(r"(?P<value>eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\."
          r"[A-Za-z0-9_-]*)", folded=False),
    # https://user:K@host (the password) and https://K@host (userinfo alone is often a token)
    _Rule(r"://(?<=[A-Za-z0-9+.-]://)[^/?#\s@:\"'<>]+:(?P<value>(?!\[REDACTED\])"
          r"[^/?#\s@\"'<>]+)(?=@)", folded=False),
    _Rule(r"://(?<=[A-Za-z0-9+.-]://)(?P<value>(?!\[REDACTED\])[^/?#\s@:\"'<>]+)(?=@)",
          folded=False),
    # a private key block, over its lines (or up to 16 KiB when its END line is missing)
    _Rule(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?P<value>(?!\[REDACTED\])"
          r"(?:[^-]|-(?!----)){1,16384})", folded=False),
)
_VALUE_GROUPS = ("list", "value")
_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _folded(text: str) -> str:
    """`text` with A-Z lowercased, every character where it was."""
    lowered = text.lower()
    # lower() keeps every offset unless a character became two (U+0130 does)
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _apply(rule: _Rule, text: str, subject: str) -> str:
    """`text` with the value of every match of `rule` in `subject` (`text`, or `text`
    lowercased) replaced."""
    parts: list[str] = []
    done = 0
    for match in rule.pattern.finditer(subject):
        name = next((g for g in _VALUE_GROUPS if g in rule.pattern.groupindex
                     and match.group(g) is not None), None)
        if name is None:
            continue
        start, end = match.span(name)
        parts += [text[done:start], REDACTED]
        done = end
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def encodings(secret: str) -> list[str]:
    """How a known secret can appear in a log: as it is, JSON-escaped, URL-encoded (a key
    holds no spaces, so quote_plus would add nothing)."""
    from urllib.parse import quote

    return sorted({secret, json.dumps(secret)[1:-1], quote(secret, safe="")}, key=len,
                  reverse=True)


RELEASE_FILES = (layout.ENGINE_CONFIG, layout.RAY_CONFIG, layout.ENGINE_ENV, layout.RANK_TABLE,
                 layout.WATCHDOG_CONFIG, layout.STATUS_FILE, layout.META_FILE)
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


def _releases(root: str) -> list[str]:
    base = os.path.join(root, layout.RELEASES_DIR)
    try:
        return sorted(n for n in os.listdir(base) if not n.startswith("."))
    except OSError:
        return []


def known_secrets(root: str) -> list[str]:
    """Every value of every release's secrets.env (the key may differ per release)."""
    found = set()
    for release in _releases(root):
        text = _read(os.path.join(root, layout.RELEASES_DIR, release, SECRET_FILE))
        if text:
            found.update(v for v in parse_env_file(text).values() if len(v) >= 4)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every known secret (in any of its encodings) and everything shaped like
    a secret replaced by [REDACTED]; redacting twice changes nothing more."""
    forms = {form for value in secrets for form in encodings(value) if len(form) >= 4}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    folded: Optional[str] = None
    for rule in SECRET_RULES:
        if rule.folded and folded is None:
            folded = _folded(text)
        changed = _apply(rule, text, folded if rule.folded else text)
        if changed is not text:
            text, folded = changed, None
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
        current = layout.current_release(self.root)
        self.add("state/current.txt", f"{current or '(none)'}\n")
        releases = []
        for release in _releases(self.root):
            directory = os.path.join(self.root, layout.RELEASES_DIR, release)
            status = (_read(os.path.join(directory, layout.STATUS_FILE)) or "unknown").strip()
            meta = _read(os.path.join(directory, layout.META_FILE))
            try:
                meta_data = json.loads(meta) if meta else {}
            except ValueError:
                meta_data = {}
            releases.append({"id": release, "status": status, "current": release == current,
                             "created": meta_data.get("created"), "by": meta_data.get("by")})
        self.add("state/releases.json", json.dumps(releases, indent=1) + "\n")
        history = _read(os.path.join(self.root, layout.HISTORY_FILE))
        if history is not None:
            self.add("state/history.jsonl", "\n".join(history.splitlines()[-300:]) + "\n")
        if units:
            self.command("state/units.txt", ["systemctl", "status", "--no-pager", "-l", "-n",
                                             "0", *units])
        self.command("state/ports.txt", ["ss", "-ltnp"])
        if current:
            directory = os.path.join(self.root, layout.RELEASES_DIR, current)
            for name in RELEASE_FILES:
                text = _read(os.path.join(directory, name))
                if text is not None:
                    self.add(f"state/release/{name}", text)
            unit_dir = os.path.join(directory, layout.UNITS_DIR)
            if os.path.isdir(unit_dir):
                for name in sorted(os.listdir(unit_dir)):
                    text = _read(os.path.join(unit_dir, name))
                    if text is not None:
                        self.add(f"state/release/units/{name}", text)

    def process_log_dirs(self) -> list[str]:
        """$ASCEND_PROCESS_LOG_PATH from the environment and the current release's engine.env."""
        dirs = [os.environ.get("ASCEND_PROCESS_LOG_PATH", "")]
        current = layout.current_release(self.root)
        if current:
            env = _read(os.path.join(self.root, layout.RELEASES_DIR, current,
                                     layout.ENGINE_ENV)) or ""
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
