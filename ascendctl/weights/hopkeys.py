"""Keys for the relay's node-to-node hops, made for one push and removed after it.

The relay used to forward the operator's ssh-agent along the chain (`ssh -A`), so root on
any node could use the operator's key on every other node while a push ran. Instead,
for every hop A → B of every chain:

1. A makes a fresh ed25519 key pair under <root>/tmp/relay-keys/<push>/ (the private key
   never leaves A; the controller only sees the public half);
2. B's login user gets one authorized_keys line for it:
   `restrict,command="<exactly this hop's relay command>",from="<A's addresses>",
   expiry-time="<now + TTL>"` — the key can run nothing but this push's relay, only
   from A, with no forwarding or terminal, and sshd refuses it after the expiry even if
   the push died before cleaning up;
3. when the push ends (normally, on error or Ctrl-C) the lines and the keys are removed;
   the next push also drops any expired relay line it finds.

So a compromised node can at most feed this push's relay stream to its next node —
which checks every object's sha256 before keeping it.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ascendctl.errors import AscendctlError
from ascendctl.weights.relay import RELAY_KEYS_DIR, Hop, NodeAccess, chain_specs
from ascendctl.weights.remote import call_helper

if TYPE_CHECKING:
    from ascendctl.transport.pool import HostPool

# How long an authorisation stays valid if the push cannot remove it (killed with -9).
HOP_KEY_TTL_S = 24 * 3600


def new_push_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)


def upstream_addresses(access: NodeAccess) -> list[str]:
    """Where the upstream node's connection can come from: its data and SSH addresses
    (as IPs: sshd matches `from=` host names only with UseDNS)."""
    found: list[str] = []
    for value in (access.host.ip, access.host.address):
        try:
            found.append(str(ipaddress.ip_address(value)))
        except ValueError:
            continue
    return list(dict.fromkeys(found))


@dataclass
class HopKeys:
    """The hop keys of one push over a pool of controller connections."""

    pool: HostPool[Any]
    accesses: dict[str, NodeAccess]
    push_id: str
    hops: list[Hop]

    @classmethod
    def for_chains(cls, pool, accesses: dict[str, NodeAccess], chains,
                   push_id: str | None = None) -> "HopKeys":
        push_id = push_id or new_push_id()
        hops = [hop for index, (chain, _) in enumerate(chains)
                for hop in chain_specs(chain, push_id, index)[1]]
        return cls(pool, accesses, push_id, hops)

    def _map(self, names: list[str], work, what: str) -> dict:
        results = self.pool.map(work, names)
        failed = [f"{n}: {r.error}" for n, r in results.items() if r.status != "ok"]
        if failed:
            raise AscendctlError(f"cannot {what}: " + "; ".join(failed))
        return {name: r.value for name, r in results.items()}

    def install(self) -> None:
        if not self.hops:
            return
        by_upstream: dict[str, list[Hop]] = {}
        for hop in self.hops:
            by_upstream.setdefault(hop.upstream.name, []).append(hop)

        def make(conn) -> dict[str, str]:
            access = self.accesses[conn.settings.name]
            public: dict[str, str] = {}
            for hop in by_upstream[access.name]:
                answer = call_helper(conn, access, "relay-key", extra=["--path", hop.key_rel])
                if not answer or "public_key" not in answer:
                    raise AscendctlError(f"{access.name}: no relay key was made")
                public[hop.key_rel] = answer["public_key"]
            return public

        made = self._map(sorted(by_upstream), make, "make the relay's hop keys")
        by_downstream: dict[str, list[dict]] = {}
        import shlex

        for hop in self.hops:
            sources = upstream_addresses(hop.upstream)
            if not sources:
                raise AscendctlError(f"{hop.upstream.name}: the relay needs its IP address "
                                     "(set ip: in the inventory)")
            by_downstream.setdefault(hop.downstream.name, []).append({
                "public_key": made[hop.upstream.name][hop.key_rel],
                "command": shlex.join(hop.command), "from": sources})

        def authorize(conn) -> None:
            access = self.accesses[conn.settings.name]
            call_helper(conn, access, "authorize",
                        {"push": self.push_id, "user": access.host.ssh.user,
                         "ttl": HOP_KEY_TTL_S, "entries": by_downstream[access.name]},
                        inline=True)

        self._map(sorted(by_downstream), authorize, "authorise the relay's hop keys")

    def remove(self) -> list[str]:
        """Remove every authorisation and key of this push; returns what failed."""
        if not self.hops:
            return []
        downstream = sorted({hop.downstream.name for hop in self.hops})
        upstream = sorted({hop.upstream.name for hop in self.hops})

        def deauthorize(conn) -> None:
            access = self.accesses[conn.settings.name]
            call_helper(conn, access, "deauthorize",
                        {"push": self.push_id, "user": access.host.ssh.user}, inline=True)

        def forget(conn) -> None:
            access = self.accesses[conn.settings.name]
            call_helper(conn, access, "remove-tree",
                        extra=["--path", f"{RELAY_KEYS_DIR}/{self.push_id}"])

        failed = []
        for names, work in ((downstream, deauthorize), (upstream, forget)):
            results = self.pool.map(work, names)
            failed += [f"{n}: {r.error}" for n, r in results.items() if r.status != "ok"]
        return failed
