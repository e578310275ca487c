"""One relay chain: the jump host streams once into the first node, each node writes what
is its own and forwards the stream to the next over ssh (with a key made for that hop
of that push, see hopkeys.py: no agent is forwarded).

    jump host ──ssh──▶ node A ──ssh──▶ node B ──ssh──▶ node C
                       (tee to store)  (tee to store)  (store)

With every link at the same rate, the chain delivers to N nodes in about the time of
one. A chain may also start at a node that already holds the objects (it reads them
from its store): then the jump host sends only headers. Nodes report JSON lines
(progress, each object's verdict, totals) that come back up the chain's stdout.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ascendctl.weights.nodehelper import helper_module
from ascendctl.weights.openssh import ssh_destination, ssh_options

if TYPE_CHECKING:
    from ascendctl.inventory.hosts import Host

CHUNK = 1 << 20
RELAY_KNOWN_HOSTS = "tmp/relay_known_hosts"
RELAY_KEYS_DIR = "tmp/relay-keys"


@dataclass(frozen=True)
class Record:
    sha256: str
    size: int
    offset: int                  # first byte to send (every target already has the rest)
    fingerprint: str
    targets: tuple[str, ...]     # nodes that store it
    source: Path | None          # file on the jump host; None: the chain's first node has it

    def header(self) -> bytes:
        data = {"t": "obj", "sha": self.sha256, "size": self.size, "offset": self.offset,
                "fingerprint": self.fingerprint, "targets": list(self.targets),
                "payload": self.source is not None}
        return (json.dumps(data, separators=(",", ":")) + "\n").encode()


@dataclass
class ChainResult:
    nodes: list[str]
    from_node: str | None
    jump_bytes: int = 0                                       # payload bytes the jump host sent
    done: dict[str, dict] = field(default_factory=dict)       # node → its final totals
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)  # (node, sha) → verdict
    errors: list[str] = field(default_factory=list)
    exit_code: int | None = None
    seconds: float = 0.0

    def links(self) -> list[tuple[str, str, int]]:
        """(from, to, bytes) of every link of this chain."""
        first = self.nodes[0]
        out = [("jump-host", first, self.jump_bytes)]
        for upstream, downstream in zip(self.nodes, self.nodes[1:]):
            out.append((upstream, downstream, int(self.done.get(upstream, {}).get("sent", 0))))
        return out


@dataclass(frozen=True)
class NodeAccess:
    """How to reach a node and run the helper there."""

    host: Host
    root: str
    python: str
    helper: str

    @property
    def name(self) -> str:
        return self.host.name

    def helper_argv(self, *args: str) -> list[str]:
        argv = [self.python, self.helper, "--root", self.root, "--name", self.name, *args]
        if self.host.ssh.uses_sudo:
            argv = ["sudo", "-n", "--"] + argv
        return argv

    def hop_spec(self, downstream: dict | None) -> dict:
        return {"name": self.name, "host": self.host.address, "port": self.host.ssh.port,
                "user": self.host.ssh.user, "python": self.python, "helper": self.helper,
                "root": self.root, "sudo": self.host.ssh.uses_sudo,
                "known_hosts": None, "identity": None,
                "connect_timeout": self.host.ssh.connect_timeout, "next": downstream}


@dataclass(frozen=True)
class Hop:
    """One node-to-node link of a chain and what authorises it."""

    upstream: NodeAccess
    downstream: NodeAccess
    key_rel: str                 # the hop's private key, relative to upstream's root
    command: list[str]           # what the downstream runs (forced for the hop key)


def chain_specs(chain: list[NodeAccess], push_id: str,
                chain_index: int) -> tuple[dict | None, list[Hop]]:
    """The nested hop specs the first node carries, and every hop of the chain."""
    module = _helper()
    downstream = None
    hops: list[Hop] = []
    for hop_index, (upstream, access) in reversed(list(enumerate(zip(chain, chain[1:])))):
        spec = access.hop_spec(downstream)
        # the hop from `upstream` checks `access`'s key with upstream's relay known_hosts
        spec["known_hosts"] = f"{upstream.root}/{RELAY_KNOWN_HOSTS}"
        key_rel = f"{RELAY_KEYS_DIR}/{push_id}/c{chain_index}h{hop_index}"
        spec["identity"] = f"{upstream.root}/{key_rel}"
        hops.insert(0, Hop(upstream, access, key_rel, module.hop_remote(spec)))
        downstream = spec
    return downstream, hops


def chain_argv(chain: list[NodeAccess], push_id: str = "", chain_index: int = 0) -> list[str]:
    """The jump host's `ssh` into the first node, carrying the rest of the chain."""
    downstream, _ = chain_specs(chain, push_id, chain_index)
    first = chain[0]
    remote = first.helper_argv("relay")
    if downstream is not None:
        remote += ["--next", _helper().encode_spec(downstream)]
    return ["ssh", *ssh_options(first.host), *ssh_destination(first.host),
            shlex.join(remote)]


def _helper():
    return helper_module()


def run_chain(chain: list[NodeAccess], records: list[Record], *, env: dict[str, str] | None,
              on_event: Callable[[dict], None], cancel: threading.Event | None = None,
              push_id: str = "", chain_index: int = 0) -> ChainResult:
    names = [a.name for a in chain]
    from_node = names[0] if records and records[0].source is None else None
    result = ChainResult(names, from_node)
    started = time.monotonic()
    proc = subprocess.Popen(chain_argv(chain, push_id, chain_index), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    stderr_tail: list[str] = []

    def read_events() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                stderr_tail.append(raw.decode(errors="replace").strip())
                continue
            kind = event.get("ev")
            if kind == "done":
                result.done[event["node"]] = event
            elif kind == "obj":
                result.objects[(event["node"], event["sha"])] = event
            elif kind == "error":
                result.errors.append(f"{event.get('node')}: {event.get('msg')}")
            on_event(event)

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                stderr_tail.append(line)
                del stderr_tail[:-20]

    readers = [threading.Thread(target=read_events, daemon=True),
               threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        _send(proc, records, result, cancel)
    except BrokenPipeError:
        result.errors.append(f"{names[0]}: the ssh stream closed early")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except BrokenPipeError:
            pass
    result.exit_code = proc.wait()
    for reader in readers:
        reader.join(timeout=10)
    if result.exit_code != 0 and not result.errors:
        detail = "; ".join(stderr_tail[-3:]) or f"ssh exited {result.exit_code}"
        result.errors.append(f"{names[0]}: relay failed: {detail}")
    elif stderr_tail and result.exit_code != 0:
        result.errors.append("ssh: " + "; ".join(stderr_tail[-3:]))
    result.seconds = time.monotonic() - started
    return result


def _send(proc: subprocess.Popen, records: list[Record], result: ChainResult,
          cancel: threading.Event | None) -> None:
    out = proc.stdin
    assert out is not None
    for record in records:
        out.write(record.header())
        if record.source is None:
            continue
        with open(record.source, "rb") as handle:
            handle.seek(record.offset)
            remaining = record.size - record.offset
            while remaining > 0:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                block = handle.read(min(CHUNK, remaining))
                if not block:
                    raise OSError(f"{record.source} is shorter than its manifest says")
                out.write(block)
                remaining -= len(block)
                result.jump_bytes += len(block)
    out.write(b'{"t":"end"}\n')
    out.flush()
