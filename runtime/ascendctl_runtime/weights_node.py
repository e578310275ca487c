"""Node side of `ascendctl weights`: the content-addressed store, the relay, verification.

Standard library only; the jump host installs this file under <deploy.root>/bin and runs
it over OpenSSH. Store layout under <root>/store:

    sha256/<ab>/<sha256>        a verified object, read-only (0444)
    sha256/<ab>/<sha256>.meta   {"size", "mtime_ns", "fingerprint"} recorded on arrival
    partial/<sha256>.part       bytes received so far (a resumed push appends to it)

Commands (JSON requests on stdin, JSON lines on stdout):

    state        what this node holds of a list of objects, and its free disk
    relay        receive a framed stream, write what is ours, forward to the next node
    verify       sizes + sampled fingerprints, or (--full) sha256 of each object
    materialise  build a directory of symlinks into the store plus a per-node index
    put-file     write stdin to a file under <root> (the relay's known_hosts)
    remove-file  remove such a file
    relay-key    make this push's key pair for one hop (the private key never leaves
                 the node); prints the public key
    authorize    add this push's hop keys to the login user's authorized_keys, each
                 restricted to one command, from the upstream node, expiring
    deauthorize  remove a push's keys (and any expired relay key) again
    remove-tree  remove a directory under <root> (a push's hop keys)

No agent is forwarded along the chain: each hop authenticates with a key made for that
push and that hop, accepted by the next node only for the exact relay command of the
push, only from the upstream node, and removed when the push ends.

Relay stream: a JSON header line per object, then its payload bytes:
    {"t": "obj", "sha": S, "size": N, "offset": O, "targets": [...], "payload": true}
    <N - O bytes>
    {"t": "obj", ..., "payload": false}   the first node sends it from its own store
    {"t": "end"}
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHUNK = 1 << 20
FP_SAMPLES = 16
FP_SAMPLE_BYTES = 4096
FP_WHOLE_BELOW = FP_SAMPLES * FP_SAMPLE_BYTES
PROGRESS_EVERY = 0.3


# -- fingerprints (the controller imports these two functions too) ---------------------

def fingerprint_offsets(size: int) -> list[int]:
    """Fixed sample offsets for a file of `size` bytes (first and last block included)."""
    if size <= FP_WHOLE_BELOW:
        return [0]
    last = size - FP_SAMPLE_BYTES
    return [last * i // (FP_SAMPLES - 1) for i in range(FP_SAMPLES)]


def fingerprint_file(path: str, size: int | None = None) -> str:
    """sha256 over the size and 16 fixed 4 KiB samples: reads 64 KiB whatever the size."""
    if size is None:
        size = os.stat(path).st_size
    digest = hashlib.sha256(b"ascendctl-fp1\0" + size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        if size <= FP_WHOLE_BELOW:
            digest.update(handle.read())
        else:
            for offset in fingerprint_offsets(size):
                handle.seek(offset)
                digest.update(handle.read(FP_SAMPLE_BYTES))
    return "fp1:" + digest.hexdigest()[:32]


def sha256_file(path: str, start: int = 0, end: int | None = None, digest=None):
    """sha256 of path[start:end] (hashlib releases the GIL: threads hash in parallel)."""
    digest = digest or hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = None if end is None else end - start
        while remaining is None or remaining > 0:
            want = CHUNK * 8 if remaining is None else min(CHUNK * 8, remaining)
            block = handle.read(want)
            if not block:
                break
            digest.update(block)
            if remaining is not None:
                remaining -= len(block)
    return digest


# -- output ----------------------------------------------------------------------------

_out_lock = threading.Lock()


def emit(event: dict) -> None:
    """One JSON line in a single write (lines from chained nodes share the same pipe)."""
    data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
    with _out_lock:
        view = memoryview(data)
        while view:
            written = os.write(1, view)
            view = view[written:]


# -- the store -------------------------------------------------------------------------

class Store:
    def __init__(self, root: str):
        self.root = root
        self.base = os.path.join(root, "store")

    def object_path(self, sha: str) -> str:
        _check_sha(sha)
        return os.path.join(self.base, "sha256", sha[:2], sha)

    def meta_path(self, sha: str) -> str:
        return self.object_path(sha) + ".meta"

    def partial_path(self, sha: str) -> str:
        _check_sha(sha)
        return os.path.join(self.base, "partial", sha + ".part")

    def free_bytes(self) -> int:
        path = self.base
        while not os.path.exists(path):
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    def read_meta(self, sha: str) -> dict | None:
        try:
            with open(self.meta_path(sha)) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def write_meta(self, sha: str, size: int, fingerprint: str) -> None:
        st = os.stat(self.object_path(sha))
        tmp = self.meta_path(sha) + ".tmp"
        with open(tmp, "w") as handle:
            json.dump({"size": size, "mtime_ns": st.st_mtime_ns, "fingerprint": fingerprint},
                      handle)
        os.replace(tmp, self.meta_path(sha))

    def check(self, sha: str, size: int, fingerprint: str | None, full: bool,
              record: bool = False) -> tuple[str, str]:
        """("ok" | "absent" | "bad", reason). A changed mtime forces a full hash;
        `record` then stores the new mtime so the next check is fast again."""
        path = self.object_path(sha)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "absent", "not in the store"
        if st.st_size != size:
            return "bad", f"size {st.st_size}, expected {size}"
        meta = self.read_meta(sha)
        unchanged = bool(meta) and meta.get("mtime_ns") == st.st_mtime_ns \
            and meta.get("size") == size
        if fingerprint and fingerprint_file(path, size) != fingerprint:
            return "bad", "sampled fingerprint differs"
        if full or not unchanged:
            actual = sha256_file(path).hexdigest()
            if actual != sha:
                return "bad", f"sha256 {actual[:16]}…, expected {sha[:16]}…"
            if not unchanged and record:
                self.write_meta(sha, size, fingerprint or fingerprint_file(path, size))
        return "ok", ""

    def quarantine(self, sha: str) -> None:
        """Remove a bad object (and its metadata) so the push sends it again."""
        for path in (self.object_path(sha), self.meta_path(sha)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def partial_size(self, sha: str) -> int:
        try:
            return os.stat(self.partial_path(sha)).st_size
        except FileNotFoundError:
            return 0


def _check_sha(sha: str) -> None:
    if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        raise ValueError(f"not a sha256: {sha!r}")


# -- state / verify --------------------------------------------------------------------

def cmd_state(store: Store, name: str, request: dict) -> int:
    repair = bool(request.get("repair"))
    objects = request.get("objects", [])

    def one(obj: dict) -> tuple[str, dict]:
        sha, size = obj["sha256"], int(obj["size"])
        status, reason = store.check(sha, size, obj.get("fingerprint"), full=False,
                                     record=repair)
        if status == "bad" and repair:
            store.quarantine(sha)
        have = size if status == "ok" else store.partial_size(sha)
        if have > size:
            have = 0
        return sha, {"status": status, "reason": reason, "have": have}

    with ThreadPoolExecutor(max_workers=_workers()) as pool:
        result = dict(pool.map(one, objects))
    emit({"ev": "state", "node": name, "free_bytes": store.free_bytes(),
          "store": store.base, "objects": result})
    return 0


def cmd_verify(store: Store, name: str, request: dict) -> int:
    full = bool(request.get("full"))

    def one(obj: dict) -> tuple[str, dict]:
        status, reason = store.check(obj["sha256"], int(obj["size"]), obj.get("fingerprint"),
                                     full=full)
        return obj["sha256"], {"status": status, "reason": reason}

    with ThreadPoolExecutor(max_workers=_workers()) as pool:
        result = dict(pool.map(one, request.get("objects", [])))
    emit({"ev": "verify", "node": name, "full": full, "objects": result})
    return 0


def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# -- relay -----------------------------------------------------------------------------

class Downstream:
    """The next node of the chain: an ssh subprocess whose stdin we feed."""

    def __init__(self, spec: dict, name: str):
        self.names = chain_names(spec)
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        self.proc = subprocess.Popen(hop_argv(spec), stdin=subprocess.PIPE, stdout=None,
                                     stderr=None, env=env)
        self.fd = self.proc.stdin.fileno()
        self.alive = True
        self.sent = 0
        self.error = ""
        self.upstream_name = name

    def write(self, data) -> None:
        if not self.alive:
            return
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
                self.sent += written
        except OSError as err:
            self.alive = False
            self.error = f"forwarding to {self.names[0]} failed: {err}"
            emit({"ev": "error", "node": self.upstream_name, "msg": self.error})

    def close(self) -> int:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        return self.proc.wait()


def chain_names(spec: dict | None) -> list[str]:
    names = []
    while spec:
        names.append(spec["name"])
        spec = spec.get("next")
    return names


def hop_remote(spec: dict) -> list[str]:
    """The command the next node runs for this hop: also the `command=` its
    authorized_keys entry forces, so the hop key can run nothing else."""
    remote = [spec["python"], spec["helper"], "--root", spec["root"], "--name", spec["name"],
              "relay"]
    if spec.get("next"):
        remote += ["--next", encode_spec(spec["next"])]
    if spec.get("sudo"):
        remote = ["sudo", "-n", "--"] + remote
    return remote


def hop_argv(spec: dict) -> list[str]:
    """`ssh` to the next node with this hop's own key and no agent (nothing forwarded),
    its host key checked against the known_hosts the jump host wrote from its own
    verified keys."""
    return ["ssh", "-a", "-T", "-x", "-o", "ForwardAgent=no", "-o", "IdentityAgent=none",
            "-o", "ClearAllForwardings=yes", "-o", "IdentitiesOnly=yes",
            "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
            "-i", spec["identity"],
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=" + spec["known_hosts"],
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ServerAliveInterval=15",
            "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,"
                  "aes256-gcm@openssh.com,aes128-ctr",
            "-o", "ConnectTimeout=" + str(int(spec.get("connect_timeout", 10))),
            "-p", str(spec["port"]), "-l", spec["user"], "--", spec["host"],
            shlex.join(hop_remote(spec))]


def encode_spec(spec: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(spec, separators=(",", ":")).encode()).decode()


def decode_spec(text: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(text.encode()))


class Reader:
    """Buffered reads from fd 0 that also hand out raw payload chunks."""

    def __init__(self):
        self.buffer = b""
        self.received = 0

    def line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            block = os.read(0, CHUNK)
            if not block:
                return None
            self.buffer += block
            if len(self.buffer) > 1 << 20:
                raise ValueError("relay header line too long")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def chunks(self, count: int):
        while count > 0:
            if self.buffer:
                block, self.buffer = self.buffer[:count], self.buffer[count:]
            else:
                block = os.read(0, min(CHUNK, count))
                if not block:
                    raise EOFError
            self.received += len(block)
            count -= len(block)
            yield block


class Progress:
    def __init__(self, name: str):
        self.name, self.written, self.received, self.last = name, 0, 0, 0.0

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= PROGRESS_EVERY:
            self.last = now
            emit({"ev": "progress", "node": self.name, "written": self.written,
                  "received": self.received})


def cmd_relay(store: Store, name: str, next_spec: dict | None) -> int:
    downstream = Downstream(next_spec, name) if next_spec else None
    reader = Reader()
    progress = Progress(name)
    failures = 0
    ended = False
    try:
        while True:
            line = reader.line()
            if line is None:
                break
            header = json.loads(line)
            if header.get("t") == "end":
                ended = True
                if downstream:
                    downstream.write(line + b"\n")
                break
            if header.get("t") != "obj":
                raise ValueError(f"unknown relay record {header!r}")
            ok = relay_object(store, name, header, reader, downstream, progress)
            failures += 0 if ok else 1
    except EOFError:
        emit({"ev": "error", "node": name, "msg": "the stream ended in the middle of an object "
              "(interrupted push; the partial file is kept for the next push)"})
        failures += 1
    finally:
        progress.received = reader.received
        progress.tick(force=True)
        code = downstream.close() if downstream else 0
    sent = downstream.sent if downstream else 0
    emit({"ev": "done", "node": name, "received": reader.received, "sent": sent,
          "downstream_exit": code, "ended": ended, "failures": failures})
    return 0 if (ended and failures == 0 and code == 0
                 and (downstream is None or downstream.alive)) else 1


def relay_object(store: Store, name: str, header: dict, reader: Reader,
                 downstream: Downstream | None, progress: Progress) -> bool:
    sha, size, offset = header["sha"], int(header["size"]), int(header["offset"])
    targets = set(header.get("targets", []))
    forward = downstream is not None and bool(targets & set(downstream.names))
    if not header.get("payload", True):
        return send_from_store(store, name, header, downstream, progress, forward)
    writer = None
    failed = False
    if name in targets:
        try:
            writer = PartialWriter(store, sha, size, offset)
        except ValueError as err:
            emit({"ev": "obj", "node": name, "sha": sha, "written": 0, "ok": False,
                  "msg": str(err)})
            failed = True
    if forward:
        downstream.write((json.dumps(header, separators=(",", ":")) + "\n").encode())
    position = offset
    try:
        for block in reader.chunks(size - offset):
            if forward:
                downstream.write(block)
            if writer:
                writer.feed(position, block)
                progress.written += len(block)
            position += len(block)
            progress.received = reader.received
            progress.tick()
    finally:
        if writer:
            writer.close()
    if writer is None:
        return not failed
    return writer.finish(name, header)


def send_from_store(store: Store, name: str, header: dict, downstream: Downstream | None,
                    progress: Progress, forward: bool) -> bool:
    sha, size, offset = header["sha"], int(header["size"]), int(header["offset"])
    if not forward:
        return True
    out = dict(header, payload=True)
    downstream.write((json.dumps(out, separators=(",", ":")) + "\n").encode())
    with open(store.object_path(sha), "rb") as handle:
        handle.seek(offset)
        remaining = size - offset
        while remaining > 0:
            block = handle.read(min(CHUNK, remaining))
            if not block:
                emit({"ev": "error", "node": name, "msg": f"{sha}: store object is short"})
                return False
            downstream.write(block)
            remaining -= len(block)
            progress.tick()
    return downstream.alive


class PartialWriter:
    """Appends the stream to <sha>.part, hashing the whole file as it grows."""

    def __init__(self, store: Store, sha: str, size: int, offset: int):
        self.store, self.sha, self.size = store, sha, size
        path = store.partial_path(sha)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b")
        try:
            # two pushes must never append to the same partial file
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.handle.close()
            raise ValueError(f"{sha}: another push is writing this object") from None
        have = os.fstat(self.handle.fileno()).st_size
        if have > size:
            have = 0                    # longer than the object: not ours, start over
        if have < offset:
            # the controller starts the stream at the smallest partial of all targets;
            # a shorter one means the file changed since: wait for the next push
            self.handle.close()
            raise ValueError(f"{sha}: partial file has {have} bytes but the stream starts "
                             f"at {offset}")
        self.digest = hashlib.sha256()
        if have:
            sha256_file(path, 0, have, self.digest)
        self.have = have
        self.handle.seek(have)
        self.handle.truncate(have)
        self.written = 0

    def feed(self, position: int, block: bytes) -> None:
        end = position + len(block)
        if end <= self.have:
            return
        if position < self.have:
            block = block[self.have - position:]
        self.handle.write(block)
        self.digest.update(block)
        self.have += len(block)
        self.written += len(block)

    def close(self) -> None:
        if not self.handle.closed:
            self.handle.flush()
            self.handle.close()

    def finish(self, name: str, header: dict) -> bool:
        path = self.store.partial_path(self.sha)
        actual = self.digest.hexdigest()
        event = {"ev": "obj", "node": name, "sha": self.sha, "written": self.written}
        if self.have != self.size or actual != self.sha:
            os.unlink(path)
            emit(dict(event, ok=False, msg=f"received {self.have} bytes with sha256 "
                      f"{actual}, expected {self.size} bytes with sha256 {self.sha}"))
            return False
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        final = self.store.object_path(self.sha)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.chmod(path, 0o444)
        os.replace(path, final)
        self.store.write_meta(self.sha, self.size,
                              header.get("fingerprint") or fingerprint_file(final, self.size))
        emit(dict(event, ok=True))
        return True


# -- materialise -----------------------------------------------------------------------

def cmd_materialise(store: Store, name: str, request: dict) -> int:
    """Make `dest` a directory of symlinks into the store, plus the per-node index.

    Built beside `dest` and renamed into place, so a reader never sees half of it."""
    dest = request["dest"].rstrip("/")
    if not dest.startswith("/"):
        raise ValueError("dest must be absolute")
    missing = [_safe_rel(e["path"]) for e in request["files"]
               if not os.path.isfile(store.object_path(e["sha256"]))]
    if missing:
        emit({"ev": "materialise", "node": name, "ok": False, "missing": missing})
        return 1
    wanted = {_safe_rel(e["path"]): ("link", store.object_path(e["sha256"]))
              for e in request["files"]}
    for rel in request.get("write") or {}:
        if _safe_rel(rel) in wanted:
            # it would be written through the link into a read-only store object
            raise ValueError(f"{rel!r} is both a store link and a written file")
    wanted.update({_safe_rel(rel): ("file", content)
                   for rel, content in (request.get("write") or {}).items()})
    if _directory_view(dest) == wanted:
        emit({"ev": "materialise", "node": name, "ok": True, "dest": dest,
              "files": len(request["files"]), "changed": False})
        return 0
    tmp = f"{dest}.tmp-{os.getpid()}"
    _remove_tree(tmp)
    os.makedirs(tmp)
    for entry in request["files"]:
        rel = _safe_rel(entry["path"])
        target = store.object_path(entry["sha256"])
        link = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(target, link)
    for rel, content in (request.get("write") or {}).items():
        _write_new_file(tmp, _safe_rel(rel), content)
    old = None
    if os.path.lexists(dest):
        old = f"{dest}.old-{os.getpid()}"
        os.rename(dest, old)
    os.rename(tmp, dest)
    if old:
        _remove_tree(old)
    emit({"ev": "materialise", "node": name, "ok": True, "dest": dest,
          "files": len(request["files"]), "changed": True})
    return 0


def _write_new_file(top: str, rel: str, content: str) -> None:
    """Create `top/rel` as a new regular file, never following a link: not at the file
    (O_NOFOLLOW | O_EXCL) and not at any directory on the way (each one is checked not
    to be a symlink), so a store object (0444, but root may write it) is never touched."""
    parts = rel.split("/")
    current = top
    for part in parts[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise ValueError(f"{rel!r} passes through a link")
        if not os.path.isdir(current):
            os.mkdir(current)
    path = os.path.join(current, parts[-1])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)


def _directory_view(path: str) -> dict | None:
    """{relative path: ("link", target) | ("file", text)} of a directory, or None."""
    if os.path.islink(path) or not os.path.isdir(path):
        return None
    view = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for item in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, item)
            rel = os.path.relpath(full, path)
            if os.path.islink(full):
                view[rel] = ("link", os.readlink(full))
            else:
                try:
                    with open(full) as handle:
                        view[rel] = ("file", handle.read())
                except (OSError, UnicodeDecodeError):
                    view[rel] = ("file", None)
    return view


def _safe_rel(rel: str) -> str:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts or not parts:
        raise ValueError(f"unsafe relative path {rel!r}")
    return "/".join(parts)


def _remove_tree(path: str) -> None:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return
    if not os.path.isdir(path):
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for item in filenames:
            os.unlink(os.path.join(dirpath, item))
        for item in dirnames:
            full = os.path.join(dirpath, item)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(path)


# -- small files -----------------------------------------------------------------------

def cmd_put_file(root: str, rel: str) -> int:
    path = os.path.join(root, _safe_rel(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "wb") as handle:
        handle.write(sys.stdin.buffer.read())
    os.replace(tmp, path)
    return 0


def cmd_remove_file(root: str, rel: str) -> int:
    try:
        os.unlink(os.path.join(root, _safe_rel(rel)))
    except FileNotFoundError:
        pass
    return 0


# -- per-push hop keys (no agent forwarding) ----------------------------------------

RELAY_KEY_TAG = "ascendctl-relay-"


def cmd_relay_key(root: str, rel: str) -> int:
    """A fresh ed25519 key pair at <root>/<rel> (0600, in a 0700 directory)."""
    path = os.path.join(root, _safe_rel(rel))
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    for stale in (path, path + ".pub"):
        if os.path.lexists(stale):
            os.unlink(stale)
    proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                           "ascendctl relay hop", "-f", path], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OSError(f"ssh-keygen failed: {proc.stderr.strip() or proc.returncode}")
    with open(path + ".pub") as handle:
        public = handle.read().split()
    emit({"ev": "relay-key", "public_key": f"{public[0]} {public[1]}"})
    return 0


def _authorized_keys_of(user: str) -> tuple[str, int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return os.path.join(entry.pw_dir, ".ssh", "authorized_keys"), entry.pw_uid, entry.pw_gid


def _relay_line_expired(line: str, now: str) -> bool:
    import re

    found = re.search(r'expiry-time="(\d{12})"', line)
    return bool(found) and found.group(1) <= now


def _rewrite_authorized_keys(user: str, keep, add: list[str]) -> int:
    """Rewrite the user's authorized_keys keeping the lines `keep` accepts, then `add`;
    atomically (sshd never reads half a file), with the owner and mode it had."""
    path, uid, gid = _authorized_keys_of(user)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
        os.chown(directory, uid, gid)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
        info = os.stat(path)
        mode, owner = stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)
    except FileNotFoundError:
        lines, mode, owner = [], 0o600, (uid, gid)
    kept = [line for line in lines if keep(line)]
    text = "".join(line + "\n" for line in kept + add)
    tmp = f"{path}.ascendctl-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(lines) - len(kept)


def cmd_authorize(request: dict) -> int:
    """Authorise this push's hop keys: `restrict` (no forwarding, no pty), one forced
    command, the upstream node's addresses only, and an expiry (sshd refuses the key
    after it even if the push died before removing it)."""
    tag = RELAY_KEY_TAG + request["push"]
    expiry = time.strftime("%Y%m%d%H%M", time.localtime(time.time() + int(request["ttl"])))
    now = time.strftime("%Y%m%d%H%M", time.localtime())
    added = []
    for entry in request["entries"]:
        command = entry["command"]
        if any(ch in command for ch in '"\\\n\r'):
            raise ValueError("the relay command holds a quote, backslash or newline")
        sources = ",".join(entry["from"])
        if not sources or any(ch in sources for ch in '"\\ \n'):
            raise ValueError("bad upstream address list")
        key_type, key_data = entry["public_key"].split()[:2]
        added.append(f'restrict,command="{command}",from="{sources}",'
                     f'expiry-time="{expiry}" {key_type} {key_data} {tag}')
    removed = _rewrite_authorized_keys(
        request["user"],
        lambda line: not (RELAY_KEY_TAG in line and _relay_line_expired(line, now)), added)
    emit({"ev": "authorize", "added": len(added), "expired_removed": removed})
    return 0


def cmd_deauthorize(request: dict) -> int:
    tag = RELAY_KEY_TAG + request["push"]
    now = time.strftime("%Y%m%d%H%M", time.localtime())
    removed = _rewrite_authorized_keys(
        request["user"],
        lambda line: not (line.endswith(" " + tag)
                          or (RELAY_KEY_TAG in line and _relay_line_expired(line, now))), [])
    emit({"ev": "deauthorize", "removed": removed})
    return 0


def cmd_remove_tree(root: str, rel: str) -> int:
    _remove_tree(os.path.join(root, _safe_rel(rel)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="weights_node")
    parser.add_argument("--root", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("command", choices=["state", "relay", "verify", "materialise",
                                            "put-file", "remove-file", "relay-key",
                                            "authorize", "deauthorize", "remove-tree"])
    parser.add_argument("--next", default=None)
    parser.add_argument("--path", default=None)
    args = parser.parse_args(argv)
    try:
        return dispatch(args)
    except (ValueError, OSError) as err:
        print(f"weights_node on {args.name}: {err}", file=sys.stderr)
        return 2


def dispatch(args) -> int:
    store = Store(args.root)
    if args.command == "relay":
        return cmd_relay(store, args.name, decode_spec(args.next) if args.next else None)
    if args.command == "put-file":
        return cmd_put_file(args.root, args.path)
    if args.command == "remove-file":
        return cmd_remove_file(args.root, args.path)
    if args.command == "relay-key":
        return cmd_relay_key(args.root, args.path)
    if args.command == "remove-tree":
        return cmd_remove_tree(args.root, args.path)
    request = json.load(sys.stdin)     # after the script itself when run inline
    if args.command == "authorize":
        return cmd_authorize(request)
    if args.command == "deauthorize":
        return cmd_deauthorize(request)
    handler = {"state": cmd_state, "verify": cmd_verify, "materialise": cmd_materialise}
    return handler[args.command](store, args.name, request)


if __name__ == "__main__":
    sys.exit(main())
