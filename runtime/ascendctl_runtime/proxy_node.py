"""The gateway's half of the proxy (standard library only; sent over SSH).

Operations (each one JSON call, one JSON answer; shipped by ascendctl/transport/nodecall.py):

    apply     put the nginx site in place (only when its content differs), check the whole
              configuration with `nginx -t` (the old site is put back when it fails), and
              make nginx.service serve it: started and enabled when it does not run,
              reloaded gracefully when the site changed — then wait until every worker runs
              the new configuration (old workers finish their requests and exit on their
              own), so a group taken out of the balancer gets nothing new afterwards
    state     whether nginx is installed and running, and the site's sha256

nginx runs under the node's systemd (nginx.service); a reload is systemd's ExecReload
(`nginx -s reload`): new workers with the new configuration, old ones finish gracefully.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import time
from typing import Any, Optional

from ascendctl_runtime.nodeutil import answer_call, write_atomic

UNIT = "nginx.service"
PID_FILE = "/run/nginx.pid"
NGINX_PATHS = ("/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx")
WORKERS_TIMEOUT_S = 30.0
SITE_DIR_PREFIX = "/etc/nginx/"


def _nginx() -> Optional[str]:
    found = shutil.which("nginx")
    if found:
        return found
    return next((p for p in NGINX_PATHS if os.access(p, os.X_OK)), None)


def _run(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _sha(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _active() -> bool:
    return _run(["systemctl", "is-active", "--quiet", UNIT]).returncode == 0


def _master_pid() -> Optional[int]:
    try:
        with open(PID_FILE) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return pid if os.path.exists(f"/proc/{pid}") else None


def _workers(master: int) -> tuple[set[int], set[int]]:
    """(serving workers, workers shutting down) of the master process."""
    serving, leaving = set(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            if ppid != master:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                title = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError, IndexError):
            continue
        if "worker process" not in title:
            continue
        (leaving if "shutting down" in title else serving).add(int(entry))
    return serving, leaving


def _wait_new_workers(master: int, before: set[int], timeout: float) -> dict[str, Any]:
    """Until no worker of BEFORE serves any more (they finish in-flight requests while
    'shutting down') and new ones do."""
    deadline = time.monotonic() + timeout
    while True:
        serving, leaving = _workers(master)
        if serving and not (serving & before):
            return {"workers": len(serving), "finishing": len(leaving)}
        if time.monotonic() > deadline:
            raise ValueError(f"nginx did not start workers with the new configuration within "
                             f"{timeout:.0f} s (workers {sorted(serving)})")
        time.sleep(0.1)


def _last_lines(text: str, count: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-count:])


def state(path: str) -> dict[str, Any]:
    return {"installed": _nginx() is not None, "active": _active(),
            "sha256": _sha(_read(path))}


def apply(path: str, content_b64: str, check: bool = False, diff: bool = False
          ) -> dict[str, Any]:
    if not path.startswith(SITE_DIR_PREFIX) or "/../" in path:
        raise ValueError(f"refusing to write {path!r}: the site lives under {SITE_DIR_PREFIX}")
    nginx = _nginx()
    if nginx is None:
        raise ValueError("nginx is not installed on this node (apt-get install nginx-light, "
                         "or nginx): the gateway balances the serving groups with it")
    new = base64.b64decode(content_b64)
    old = _read(path)
    changed = old != new
    active = _active()
    answer: dict[str, Any] = {"changed": changed, "was_active": active,
                              "sha256": _sha(new), "previous_sha256": _sha(old)}
    if diff and changed and old is not None:
        answer["previous"] = old.decode("utf-8", "replace")   # a site holds no secret
    if check:
        return answer
    if changed:
        write_atomic(path, new, 0o644)
        test = _run([nginx, "-t", "-q"])
        if test.returncode != 0:
            if old is None:
                os.unlink(path)
            else:
                write_atomic(path, old, 0o644)
            raise ValueError(f"nginx -t refused the site (the previous one is back): "
                             f"{_last_lines(test.stderr or test.stdout)}")
    enabled = _run(["systemctl", "is-enabled", "--quiet", UNIT]).returncode == 0
    if not enabled:
        _run(["systemctl", "enable", "--quiet", UNIT])
    answer["enabled"] = not enabled
    if not active:
        started = _run(["systemctl", "start", UNIT], timeout=120)
        if started.returncode != 0 or not _active():
            journal = _run(["journalctl", "-u", UNIT, "-n", "5", "--no-pager", "-o", "cat"])
            raise ValueError(f"systemctl start {UNIT} failed: "
                             f"{_last_lines(started.stderr or journal.stdout)}")
        answer["started"] = True
        return answer
    if changed:
        master = _master_pid()
        before = _workers(master)[0] if master else set()
        reloaded = _run(["systemctl", "reload", UNIT], timeout=120)
        if reloaded.returncode != 0:
            raise ValueError(f"systemctl reload {UNIT} failed: {_last_lines(reloaded.stderr)}")
        answer["reloaded"] = True
        if master:
            answer.update(_wait_new_workers(master, before, WORKERS_TIMEOUT_S))
    return answer


def run_call(payload: bytes) -> int:
    return answer_call(payload, {"apply": apply, "state": state})
