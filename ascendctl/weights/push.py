"""`ascendctl weights push`: fill every node's content-addressed store, relayed.

1. Ask every node what it holds of its plan (size + mtime + sampled fingerprint; a
   changed mtime means a full sha256) and how much disk is free. Bad objects are
   removed so they are sent again.
2. Refuse, with the numbers, if any node lacks the space: nothing has been sent.
3. Group the missing objects by the set of nodes missing them; each group is one relay
   chain over those nodes, started by a node that already holds the objects when there
   is one (the jump host then sends nothing), else by the jump host. Every object is
   resent from the first byte no target holds (resumable within a file).
4. Each node checks sha256 as it writes; a mismatch fails the push naming node and file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit
from ascendctl.transport import SshPool
from ascendctl.weights.hopkeys import HopKeys
from ascendctl.weights.openssh import relay_known_hosts
from ascendctl.weights.plan import NodePlan, WeightsPlan
from ascendctl.weights.progress import PushProgress, human_bytes
from ascendctl.weights.relay import RELAY_KNOWN_HOSTS, ChainResult, NodeAccess, Record, run_chain
from ascendctl.weights.remote import call_helper, install_helper, node_access, objects_request

DISK_RESERVE_BYTES = 1 << 20     # never fill a filesystem to the last byte


@dataclass
class NodeState:
    name: str
    free_bytes: int
    store: str
    objects: dict[str, dict]          # sha → {"status", "have", "reason"}

    def missing(self, plan: NodePlan) -> list:
        return [f for f in _unique(plan.files) if self.objects[f.entry.sha256]["status"] != "ok"]

    def bytes_to_write(self, plan: NodePlan) -> int:
        return sum(f.entry.size - int(self.objects[f.entry.sha256]["have"])
                   for f in self.missing(plan))


@dataclass
class PushSummary:
    ok: bool
    seconds: float
    bytes_from_jump_host: int
    links: dict[tuple[str, str], int]
    nodes: dict[str, dict]
    chains: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "seconds": round(self.seconds, 3),
                "bytes_from_jump_host": self.bytes_from_jump_host,
                "links": [{"from": a, "to": b, "bytes": n} for (a, b), n in self.links.items()],
                "nodes": list(self.nodes.values()), "chains": self.chains,
                "errors": self.errors}


class DiskSpaceError(AscendctlError):
    pass


def _unique(files):
    seen = set()
    for planned in files:
        if planned.entry.sha256 not in seen:
            seen.add(planned.entry.sha256)
            yield planned


def gather_states(pool, inv, plan: WeightsPlan, *, repair: bool) -> dict[str, NodeState]:
    """Every node's holdings and free disk. `repair=False` (check mode) changes nothing
    on the nodes; `repair=True` installs the helper and removes corrupt objects."""
    accesses = {h.name: node_access(inv, h) for h in inv.hosts}

    def one(conn) -> NodeState:
        name = conn.settings.name
        access = accesses[name]
        if repair:       # a real push: the relay runs the installed helper
            install_helper(conn, access)
        answer = call_helper(conn, access, "state",
                             {"repair": repair,
                              "objects": objects_request(plan.node(name).files)},
                             inline=True)
        if not answer:
            raise AscendctlError(f"{name}: no answer from the weights helper")
        return NodeState(name, int(answer["free_bytes"]), answer["store"], answer["objects"])

    results = pool.map(one, [n.name for n in plan.nodes])
    failed = [f"{name}: {r.error}" for name, r in results.items() if r.status != "ok"]
    if failed:
        unreachable = any(r.status == "unreachable" for r in results.values())
        raise AscendctlError("cannot read the nodes' stores, nothing was sent: "
                             + "; ".join(failed),
                             exit_code=Exit.UNREACHABLE if unreachable else None)
    return {name: r.value for name, r in results.items()}


def check_disk(plan: WeightsPlan, states: dict[str, NodeState]) -> None:
    short = []
    for node in plan.nodes:
        state = states[node.name]
        need = state.bytes_to_write(node)
        if need and need + DISK_RESERVE_BYTES > state.free_bytes:
            short.append(f"{node.name} needs {human_bytes(need)} ({need} bytes) more in "
                         f"{state.store}, {human_bytes(state.free_bytes)} "
                         f"({state.free_bytes} bytes) free")
    if short:
        raise DiskSpaceError("not enough disk, nothing was sent: " + "; ".join(short))


def build_chains(plan: WeightsPlan, states: dict[str, NodeState],
                 accesses: dict[str, NodeAccess]) -> list[tuple[list[NodeAccess], list[Record]]]:
    rank = {n.name: n.rank for n in plan.nodes}
    objects = plan.objects()
    missing_on: dict[str, list[str]] = {}
    holders: dict[str, set[str]] = {}
    for node in plan.nodes:
        state = states[node.name]
        for planned in _unique(node.files):
            sha = planned.entry.sha256
            if state.objects[sha]["status"] == "ok":
                holders.setdefault(sha, set()).add(node.name)
            else:
                missing_on.setdefault(sha, []).append(node.name)
    # one chain per (nodes missing it, node that can serve it): a node holding an object
    # serves it to the others, so the jump host sends only what no node has
    groups: dict[tuple[tuple[str, ...], str | None], list[str]] = {}
    for sha, names in missing_on.items():
        targets = tuple(sorted(names, key=rank.__getitem__))
        holder = min(holders[sha], key=rank.__getitem__) if holders.get(sha) else None
        groups.setdefault((targets, holder), []).append(sha)
    chains = []
    for (targets, source), shas in sorted(groups.items(),
                                          key=lambda kv: -sum(objects[s].entry.size
                                                              for s in kv[1])):
        records = []
        for sha in sorted(shas, key=lambda s: objects[s].path):
            planned = objects[sha]
            offset = min(int(states[t].objects[sha]["have"]) for t in targets)
            records.append(Record(sha, planned.entry.size, offset, planned.entry.fingerprint,
                                  targets, None if source else planned.source))
        names = ([source] if source else []) + list(targets)
        chains.append(([accesses[n] for n in names], records))
    return chains


def push(inv, plan: WeightsPlan, *, show_progress: bool = True, pool=None) -> PushSummary:
    started = time.monotonic()
    own_pool = pool is None
    pool = pool or SshPool(inv.hosts)
    try:
        return _push(inv, plan, pool, started, show_progress)
    finally:
        if own_pool:
            pool.close()


def _push(inv, plan: WeightsPlan, pool, started: float, show_progress: bool) -> PushSummary:
    accesses = {h.name: node_access(inv, h) for h in inv.hosts}
    states = gather_states(pool, inv, plan, repair=True)
    check_disk(plan, states)
    chains = build_chains(plan, states, accesses)
    totals = {n.name: states[n.name].bytes_to_write(n) for n in plan.nodes}
    nodes = {n.name: {"name": n.name, "objects": len(list(_unique(n.files))),
                      "bytes": sum(f.entry.size for f in _unique(n.files)),
                      "already_present": sum(1 for f in _unique(n.files)
                                             if states[n.name].objects[f.entry.sha256]
                                             ["status"] == "ok"),
                      "resumed_bytes": sum(int(states[n.name].objects[f.entry.sha256]["have"])
                                           for f in states[n.name].missing(n)),
                      "to_write": totals[n.name], "written": 0, "received": 0,
                      "repaired": sorted(f.path for f in _unique(n.files)
                                         if states[n.name].objects[f.entry.sha256]["status"]
                                         == "bad"),
                      "ok": True, "errors": []} for n in plan.nodes}
    links: dict[tuple[str, str], int] = {}
    results: list[ChainResult] = []
    if chains:
        relay_hosts = [accesses[a.name].host for chain, _ in chains for a in chain[1:]]
        forwarders = sorted({a.name for chain, _ in chains for a in chain[:-1]})
        hop_keys = HopKeys.for_chains(pool, accesses, chains)
        try:
            if relay_hosts:
                _put_known_hosts(pool, accesses, forwarders, relay_known_hosts(relay_hosts))
                hop_keys.install()
            with PushProgress(totals, enabled=show_progress) as progress:
                for index, (chain, records) in enumerate(chains):
                    progress.new_session()
                    result = run_chain(chain, records, env=None, on_event=progress.on_event,
                                       push_id=hop_keys.push_id, chain_index=index)
                    results.append(result)
                    if result.errors and result.exit_code not in (0, 1):
                        break
        finally:
            if relay_hosts:
                cleanup_errors = hop_keys.remove()
                _remove_known_hosts(pool, accesses, forwarders)
                if cleanup_errors:
                    import sys

                    print("warning: could not remove the relay's hop keys (they expire by "
                          "themselves): " + "; ".join(cleanup_errors), file=sys.stderr)
    errors = _collect(plan, chains, results, nodes, links)
    summary = PushSummary(not errors, time.monotonic() - started,
                          sum(r.jump_bytes for r in results), links, nodes,
                          [{"nodes": r.nodes, "from_node": r.from_node,
                            "seconds": round(r.seconds, 3), "jump_bytes": r.jump_bytes}
                           for r in results], errors)
    return summary


def _collect(plan: WeightsPlan, chains, results: list[ChainResult], nodes: dict,
             links: dict) -> list[str]:
    names_of: dict[str, list[str]] = {}
    for node in plan.nodes:
        for planned in node.files:
            names_of.setdefault(planned.entry.sha256, []).append(planned.path)
    errors: list[str] = []
    for (_chain, records), result in zip(chains, results):
        for link in result.links():
            if link[0] == "jump-host" and result.from_node:
                key = ("jump-host", link[1])
            else:
                key = (link[0], link[1])
            links[key] = links.get(key, 0) + link[2]
        for name, done in result.done.items():
            nodes[name]["received"] += int(done.get("received", 0))
        for record in records:
            for target in record.targets:
                verdict = result.objects.get((target, record.sha256))
                files = ", ".join(sorted(set(names_of.get(record.sha256, [record.sha256]))))
                if verdict is None:
                    message = f"{target}: {files}: not received"
                elif not verdict.get("ok"):
                    message = f"{target}: {files}: {verdict.get('msg')}"
                else:
                    nodes[target]["written"] += int(verdict.get("written", 0))
                    continue
                nodes[target]["ok"] = False
                nodes[target]["errors"].append(message)
                errors.append(message)
        for error in result.errors:
            if error not in errors:
                errors.append(error)
    if len(results) < len(chains):
        errors.append("stopped after a failed relay chain; run push again to continue")
    return errors


def _put_known_hosts(pool, accesses: dict[str, NodeAccess], names: list[str],
                     text: str) -> None:
    def one(conn) -> None:
        access = accesses[conn.settings.name]
        call_helper(conn, access, "put-file", extra=["--path", RELAY_KNOWN_HOSTS],
                    stdin=text.encode())

    results = pool.map(one, names)
    failed = [f"{n}: {r.error}" for n, r in results.items() if r.status != "ok"]
    if failed:
        raise AscendctlError("cannot prepare the relay: " + "; ".join(failed))


def _remove_known_hosts(pool, accesses: dict[str, NodeAccess], names: list[str]) -> None:
    def one(conn) -> None:
        access = accesses[conn.settings.name]
        call_helper(conn, access, "remove-file", extra=["--path", RELAY_KNOWN_HOSTS])

    pool.map(one, names)
