"""Release bookkeeping on a node (stage, install units, switch, history, lock, prune) and
its live status (units, NPUs, RoCE links, the engine's metrics).

The controller ships this module (with nodeutil) and the call (one JSON object) on stdin
to the node's Python (ascendctl/transport/nodecall.py), so it works before any release
exists and no value ever passes through a shell; each call prints one JSON object.
Layout under ROOT (the inventory's deploy.root):

    releases/<id>/...          the release's files (content-addressed id)
    releases/<id>/.status      staged | active | failed | superseded
    releases/<id>/.meta.json   when, by whom, what (not part of the content)
    current -> releases/<id>   switched atomically (a new link renamed over the old)
    history.jsonl              one JSON event per line
    deploy.lock/holder.json    the cluster-wide deploy lock (held on the head)
    deploy.lock/heartbeat      its mtime: the holder's last heartbeat

A release directory is never missing while it is replaced: the new one is built next to
it and the two are swapped with renameat2(RENAME_EXCHANGE) (one atomic step); only where
the kernel or file system cannot exchange does it fall back to two renames.
"""

from __future__ import annotations

import base64
import difflib
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Optional

from ascendctl_runtime import layout
from ascendctl_runtime.layout import META_FILE, STATUS_FILE, current_release
from ascendctl_runtime.nodeutil import append_json_line, write_atomic

UNIT_DIR = "/etc/systemd/system"
HIDDEN = (STATUS_FILE, META_FILE)
MODEL_DIR = "model"
STAGING_PREFIX = ".staging-"
AT_FDCWD = -100
RENAME_EXCHANGE = 2
# What renameat2 answers where it cannot exchange (old kernel or libc, file system).
NO_EXCHANGE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)
FORCE_LEVELS = ("no", "stale", "any")


# -- small helpers ---------------------------------------------------------------------

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _releases_dir(root: str) -> str:
    return os.path.join(root, layout.RELEASES_DIR)


def _release_dir(root: str, release_id: str) -> str:
    if not release_id or "/" in release_id or release_id in (".", ".."):
        raise ValueError(f"bad release id {release_id!r}")
    return os.path.join(_releases_dir(root), release_id)


def _status(root: str, release_id: str) -> str:
    data = _read(os.path.join(_release_dir(root, release_id), STATUS_FILE))
    return data.decode().strip() if data else "unknown"


def _set_status(root: str, release_id: str, status: str) -> None:
    write_atomic(os.path.join(_release_dir(root, release_id), STATUS_FILE),
                  (status + "\n").encode(), 0o644)


def _meta(root: str, release_id: str) -> dict[str, Any]:
    data = _read(os.path.join(_release_dir(root, release_id), META_FILE))
    try:
        return json.loads(data) if data else {}
    except ValueError:
        return {}


def _release_files(directory: str) -> dict[str, str]:
    """Relative path → sha256 of every rendered file of a release: not the bookkeeping,
    not `model/` (links into the weights store, made by the weights step), not the
    bytecode Python caches next to the runtime when it runs."""
    found: dict[str, str] = {}
    for base, dirs, files in os.walk(directory):
        if base == directory and MODEL_DIR in dirs:
            dirs.remove(MODEL_DIR)
        if "__pycache__" in dirs:
            dirs.remove("__pycache__")
        dirs.sort()
        for name in files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, directory)
            if rel in HIDDEN or os.path.islink(path):
                continue
            found[rel] = _sha(_read(path) or b"")
    return found


def exchange_paths(first: str, second: str) -> bool:
    """Swap two existing paths in one atomic step (renameat2 RENAME_EXCHANGE).

    False when this kernel, libc or file system cannot exchange (nothing was changed)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second),
                 RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), second)


def replace_directory(new: str, directory: str) -> None:
    """Put directory NEW in place of DIRECTORY; DIRECTORY exists at every moment."""
    if not os.path.lexists(directory):
        os.rename(new, directory)
        return
    if exchange_paths(new, directory):
        shutil.rmtree(new)            # it now holds the old directory
        return
    old = f"{directory}.old-{os.getpid()}"
    os.rename(directory, old)
    os.rename(new, directory)
    shutil.rmtree(old, ignore_errors=True)


def _copy_model_links(source: str, dest: str) -> None:
    """`<release>/model` (links into the store, the node's own index) into a new directory."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), dest)
    elif os.path.isdir(source):
        shutil.copytree(source, dest, symlinks=True)


# -- operations --------------------------------------------------------------------------

def nic_carrying(ip: str) -> Optional[str]:
    """The interface that holds `ip` (what GLOO/TP/HCCL_SOCKET_IFNAME must name)."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True,
                         text=True).stdout
    try:
        links = json.loads(out or "[]")
    except ValueError:
        return None
    for link in links:
        for addr in link.get("addr_info", []):
            if addr.get("local") == ip:
                return link.get("ifname")
    return None


def hccn_conf_addresses(path: str = "/etc/hccn.conf") -> dict[int, str]:
    """`address_N=IP` lines: the RoCE device IPs the node is configured with."""
    found: dict[int, str] = {}
    for line in (_read(path) or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith("address_") and key[8:].isdigit():
            found[int(key[8:])] = value.strip()
    return found


def op_state(root: str, units: list[str], history_tail: int = 50,
             ip: Optional[str] = None) -> dict[str, Any]:
    releases = []
    leftovers = []
    if os.path.isdir(_releases_dir(root)):
        for name in sorted(os.listdir(_releases_dir(root))):
            if name.startswith(STAGING_PREFIX):
                leftovers.append(name)
            if name.startswith("."):
                continue
            meta = _meta(root, name)
            units_dir = os.path.join(_release_dir(root, name), layout.UNITS_DIR)
            units_here = sorted(os.listdir(units_dir)) if os.path.isdir(units_dir) else []
            releases.append({"id": name, "status": _status(root, name),
                             "created": meta.get("created"), "by": meta.get("by"),
                             "summary": meta.get("summary"), "units": units_here})
    return {
        "hostname": os.uname().nodename,
        "current": current_release(root),
        "releases": releases,
        "history": read_history(root, history_tail),
        "lock": _public(_lock_info(root)),
        "leftovers": leftovers,
        "units": {unit: unit_state(unit) for unit in units},
        "nic": nic_carrying(ip) if ip else None,
        "device_ips": [addr for _i, addr in sorted(hccn_conf_addresses().items())],
        "maintenance": _maintenance(root),
    }


def _maintenance(root: str) -> Optional[dict[str, Any]]:
    from ascendctl_runtime import maintenance

    record = maintenance.read(root)
    return record.to_dict() if record else None


def unit_state(unit: str) -> dict[str, Any]:
    out = subprocess.run(
        ["systemctl", "show", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID",
         "-p", "ActiveEnterTimestampMonotonic", "-p", "NRestarts", "-p", "LoadState",
         "-p", "Result", "-p", "UnitFileState", unit], capture_output=True, text=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    installed = _read(os.path.join(UNIT_DIR, unit))
    return {
        "load": values.get("LoadState", "unknown"),
        "active": values.get("ActiveState", "unknown"),
        "sub": values.get("SubState", ""),
        "result": values.get("Result", ""),
        "main_pid": int(values.get("MainPID", "0") or 0),
        "restarts": int(values.get("NRestarts", "0") or 0),
        "since_us": int(values.get("ActiveEnterTimestampMonotonic", "0") or 0),
        "file_state": values.get("UnitFileState", ""),
        "installed_sha": _sha(installed) if installed is not None else None,
    }


def op_stage(root: str, release_id: str, files: list[dict[str, Any]], meta: dict[str, Any],
             check: bool, diff: bool) -> dict[str, Any]:
    """Write a release directory atomically; compare with the current release."""
    wanted = {f["path"]: (base64.b64decode(f["b64"]), int(f["mode"]), bool(f.get("secret")))
              for f in files}
    directory = _release_dir(root, release_id)
    current = current_release(root)
    compare_to = directory if os.path.isdir(directory) else (
        _release_dir(root, current) if current else None)
    diffs = []
    for path, (data, _mode, secret) in sorted(wanted.items()):
        before = _read(os.path.join(compare_to, path)) if compare_to else None
        if before == data:
            continue
        entry: dict[str, Any] = {"path": path, "state": "new" if before is None else "changed"}
        if diff and not secret and _is_text(data) and (before is None or _is_text(before)):
            entry["diff"] = "".join(difflib.unified_diff(
                (before or b"").decode().splitlines(keepends=True),
                data.decode().splitlines(keepends=True),
                fromfile=f"{current or '(none)'}/{path}", tofile=f"{release_id}/{path}"))
        elif secret:
            entry["diff"] = "(secret: content not shown)"
        diffs.append(entry)
    exists = os.path.isdir(directory)
    identical = exists and _release_files(directory) == {
        path: _sha(data) for path, (data, _m, _s) in wanted.items()}
    result = {"release": release_id, "exists": exists, "identical": identical,
              "current": current, "files": diffs, "changed": not identical}
    if check or identical:
        return result
    staging = os.path.join(_releases_dir(root), f"{STAGING_PREFIX}{release_id}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    for path, (data, mode, _secret) in wanted.items():
        write_atomic(os.path.join(staging, path), data, mode)
    write_atomic(os.path.join(staging, STATUS_FILE), b"staged\n", 0o644)
    write_atomic(os.path.join(staging, META_FILE),
                  (json.dumps(meta, sort_keys=True) + "\n").encode(), 0o644)
    if exists:
        # Same id, different bytes: a half-written or tampered release. The new directory
        # keeps the model links (the weights step owns them) and takes the old one's
        # place in one step: an engine (re)starting meanwhile finds a whole release.
        _copy_model_links(os.path.join(directory, MODEL_DIR), os.path.join(staging, MODEL_DIR))
    replace_directory(staging, directory)
    return result


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


def op_install_units(root: str, release_id: str, units: list[str], check: bool
                     ) -> dict[str, Any]:
    """Copy the release's unit files into /etc/systemd/system; daemon-reload if any changed."""
    directory = _release_dir(root, release_id)
    changed = []
    for unit in units:
        data = _read(os.path.join(directory, layout.UNITS_DIR, unit))
        if data is None:
            raise ValueError(f"release {release_id} has no unit {unit}")
        if _read(os.path.join(UNIT_DIR, unit)) != data:
            changed.append(unit)
            if not check:
                write_atomic(os.path.join(UNIT_DIR, unit), data, 0o644)
    if changed and not check:
        subprocess.run(["systemctl", "daemon-reload"], check=True)
    return {"changed": changed}


def op_switch(root: str, release_id: str, check: bool) -> dict[str, Any]:
    """Point `current` at the release (atomic rename of a new symlink)."""
    directory = _release_dir(root, release_id)
    if not os.path.isdir(directory):
        raise ValueError(f"release {release_id} is not on this node")
    previous = current_release(root)
    if previous == release_id:
        if not check:
            _set_status(root, release_id, "active")
        return {"changed": False, "previous": previous}
    if not check:
        link = os.path.join(root, layout.CURRENT_LINK)
        tmp = os.path.join(root, f".current-{os.getpid()}")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join(layout.RELEASES_DIR, release_id), tmp)
        os.replace(tmp, link)
        _set_status(root, release_id, "active")
        if previous and os.path.isdir(_release_dir(root, previous)) \
                and _status(root, previous) == "active":
            _set_status(root, previous, "superseded")
    return {"changed": True, "previous": previous}


def op_unset_current(root: str) -> dict[str, Any]:
    """No release is current any more (a first deploy that failed after its commit)."""
    link = os.path.join(root, layout.CURRENT_LINK)
    if not os.path.islink(link):
        return {"changed": False, "previous": None}
    previous = current_release(root)
    os.unlink(link)
    return {"changed": True, "previous": previous}


def op_mark(root: str, release_id: str, status: str) -> dict[str, Any]:
    if status not in ("staged", "active", "failed", "superseded"):
        raise ValueError(f"bad status {status!r}")
    if os.path.isdir(_release_dir(root, release_id)):
        _set_status(root, release_id, status)
    return {"changed": True}


def read_history(root: str, tail: int) -> list[dict[str, Any]]:
    data = _read(os.path.join(root, layout.HISTORY_FILE))
    events = []
    for line in (data or b"").decode("utf-8", "replace").splitlines()[-tail:]:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def op_history(root: str, event: dict[str, Any]) -> dict[str, Any]:
    append_json_line(os.path.join(root, layout.HISTORY_FILE), event)
    return {"changed": True}


def op_prune(root: str, keep: int, protect: list[str], check: bool) -> dict[str, Any]:
    """Remove the oldest releases beyond `keep`; never the current or protected ones."""
    current = current_release(root)
    candidates = []
    if os.path.isdir(_releases_dir(root)):
        for name in os.listdir(_releases_dir(root)):
            if name.startswith(STAGING_PREFIX) and not check:
                shutil.rmtree(os.path.join(_releases_dir(root), name), ignore_errors=True)
                continue
            if name.startswith("."):
                continue
            created = _meta(root, name).get("created") or ""
            # Releases that failed go first: the ones kept are the newest that served.
            candidates.append((_status(root, name) != "failed", created, name))
    candidates.sort(reverse=True)
    kept = [name for _ok, _c, name in candidates[:keep]]
    removed = [name for _ok, _c, name in candidates[keep:]
               if name != current and name not in protect]
    if not check:
        for name in removed:
            shutil.rmtree(_release_dir(root, name))
    return {"changed": bool(removed), "removed": removed, "kept": kept}


def _lock_dir(root: str) -> str:
    return os.path.join(root, "deploy.lock")


def _lock_info(root: str) -> Optional[dict[str, Any]]:
    """The holder (with its token) and the age of its last heartbeat; None when free.

    A lock directory whose holder file is missing or unreadable (a holder that died while
    taking it) still ages, from the directory's own time, so it can go stale."""
    if not os.path.isdir(_lock_dir(root)):
        return None
    data = _read(os.path.join(_lock_dir(root), "holder.json"))
    try:
        holder = json.loads(data) if data is not None else None
    except ValueError:
        holder = None
    if not isinstance(holder, dict):
        holder = {"holder": "(unreadable)"}
    try:
        beat = os.stat(os.path.join(_lock_dir(root), "heartbeat")).st_mtime
    except FileNotFoundError:
        try:
            beat = os.stat(_lock_dir(root)).st_mtime
        except FileNotFoundError:
            return None
    holder["heartbeat_age_s"] = round(time.time() - beat, 1)
    return holder


def _public(info: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """A lock holder as shown to others: without the token that proves holding it."""
    return None if info is None else {k: v for k, v in info.items() if k != "token"}


def op_lock(root: str, action: str, holder: dict[str, Any], stale_after: float,
            force: str = "no") -> dict[str, Any]:
    """acquire | heartbeat | release the deploy lock.

    force (acquire only): "no"; "stale" breaks a lock whose heartbeat is older than
    stale_after seconds (a deploy that died) and refuses a fresh one; "any" breaks any
    lock (the operator's second, explicit consent). A broken lock is recorded in the
    history. heartbeat and release act only with the holder's token; both answer who
    holds the lock now, so a holder learns that it lost it."""
    if force not in FORCE_LEVELS:
        raise ValueError(f"bad force level {force!r}")
    lock = _lock_dir(root)
    if action == "acquire":
        os.makedirs(root, exist_ok=True)
        broken = None
        info = _lock_info(root)
        if info is not None and force != "no":
            age = float(info.get("heartbeat_age_s", 0.0))
            if force == "any" or age > stale_after:
                shutil.rmtree(lock, ignore_errors=True)
                broken = _public(info)
                op_history(root, {"event": "lock-broken", "holder": info.get("holder"),
                                  "since": info.get("since"), "heartbeat_age_s": age,
                                  "stale": age > stale_after, "by": holder.get("holder"),
                                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        try:
            os.mkdir(lock, 0o700)
        except FileExistsError:
            info = _lock_info(root) or {}
            age = float(info.get("heartbeat_age_s", 0.0))
            return {"acquired": False, "holder": _public(info), "stale": age > stale_after,
                    "refused_force": force == "stale"}
        write_atomic(os.path.join(lock, "holder.json"),
                      (json.dumps(holder, sort_keys=True) + "\n").encode(), 0o644)
        write_atomic(os.path.join(lock, "heartbeat"), b"", 0o644)
        return {"acquired": True, "broke": broken}
    info = _lock_info(root)
    mine = info is not None and info.get("token") == holder.get("token")
    if action == "heartbeat":
        if mine:
            os.utime(os.path.join(lock, "heartbeat"))
        return {"held": mine, "holder": _public(info)}
    if action == "release":
        if mine:
            shutil.rmtree(lock, ignore_errors=True)
        return {"released": mine, "holder": None if mine else _public(info)}
    raise ValueError(f"bad lock action {action!r}")



OPERATIONS = {
    "state": op_state, "stage": op_stage, "install_units": op_install_units,
    "switch": op_switch, "unset_current": op_unset_current, "mark": op_mark,
    "history": op_history, "prune": op_prune, "lock": op_lock,
}


def call(op: str, root: str, **kwargs: Any) -> dict[str, Any]:
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}; one of {sorted(OPERATIONS)}")
    return OPERATIONS[op](root, **kwargs)


def run_call(payload: bytes) -> int:
    """Run {"op", "root", "kwargs"} and print the result (or {"error"}) as JSON."""
    request = json.loads(payload)
    try:
        result = call(request["op"], request["root"], **request.get("kwargs", {}))
    except (OSError, ValueError, TypeError, subprocess.CalledProcessError) as err:
        print(json.dumps({"error": f"{request.get('op')}: {err}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_call(sys.stdin.buffer.read()))
