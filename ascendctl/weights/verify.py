"""`ascendctl weights verify`: does every node hold exactly what its plan says?

Fast (default): size and sampled fingerprint of each object; an object whose mtime
changed since it was verified on arrival is hashed in full. `--full`: sha256 of every
object. A mismatch names the node and the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.errors import AscendctlError
from ascendctl.transport import SshPool
from ascendctl.weights.plan import WeightsPlan
from ascendctl.weights.remote import call_helper, node_access, objects_request


@dataclass(frozen=True)
class Mismatch:
    node: str
    path: str
    status: str      # absent | bad
    reason: str

    def __str__(self) -> str:
        return f"{self.node}: {self.path}: {self.reason}"


@dataclass
class VerifyReport:
    full: bool
    nodes: dict[str, int]            # node → objects checked
    mismatches: list[Mismatch]
    unreachable: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.unreachable

    def to_dict(self) -> dict:
        return {"ok": self.ok, "full": self.full,
                "nodes": [{"name": n, "objects": c,
                           "mismatches": [m.__dict__ for m in self.mismatches if m.node == n]}
                          for n, c in self.nodes.items()],
                "unreachable": self.unreachable}


def verify(inv, plan: WeightsPlan, *, full: bool = False, pool=None) -> VerifyReport:
    own = pool is None
    pool = pool or SshPool(inv.hosts)
    accesses = {h.name: node_access(inv, h) for h in inv.hosts}

    def one(conn) -> dict:
        name = conn.settings.name
        access = accesses[name]
        answer = call_helper(conn, access, "verify",
                             {"full": full, "objects": objects_request(plan.node(name).files)},
                             inline=True)
        if not answer:
            raise AscendctlError("no answer from the weights helper")
        return answer["objects"]

    try:
        results = pool.map(one, [n.name for n in plan.nodes])
    finally:
        if own:
            pool.close()
    mismatches: list[Mismatch] = []
    unreachable: dict[str, str] = {}
    counts: dict[str, int] = {}
    for node in plan.nodes:
        result = results[node.name]
        if result.status != "ok":
            unreachable[node.name] = result.error or result.status
            continue
        counts[node.name] = len(result.value)
        for planned in node.files:
            verdict = result.value.get(planned.entry.sha256, {})
            if verdict.get("status") != "ok":
                mismatches.append(Mismatch(node.name, planned.path,
                                           verdict.get("status", "absent"),
                                           verdict.get("reason", "not checked")))
    return VerifyReport(full, counts, mismatches, unreachable)
