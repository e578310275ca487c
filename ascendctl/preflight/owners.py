"""Our own running units, so that a preflight before a second deploy passes.

On a re-deploy the engine of the current release still holds the NPUs and the launch
ports. The gather round trip also lists every process in the cgroup of an
`ascendctl-*.service` unit (and of nginx.service, the head's proxy), read from
/proc/PID/cgroup - the unit's whole cgroup, so worker processes count, not only the
MainPID. Their PIDs may hold NPUs (`npu.processes`), and a launch port held only by
them is not required to be free (`host.ports`); the report lists what was allowed.

The listing runs after the fact commands, with the PIDs alive at that moment. A PID that
`ss` listed on a launch port and that is gone by then holds nothing any more: a unit's
short-lived child (the exporter forking npu-smi, between fork and exec, still holds the
exporter's listening socket) must not make our own port look taken by a stranger.
(npu-smi lists processes with a device context, which a fork does not make: NPU holders
are judged by their unit alone.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ascendctl.inventory import Host, Inventory
from ascendctl.preflight.expectations import OwnHolders
from ascendctl.preflight.launch import OWN_UNIT_PREFIX, ports_bound

_UNIT_RE = r"/(ascendctl-[A-Za-z0-9_.@-]+|nginx)\.service"


@dataclass(frozen=True)
class Owners:
    """PID -> unit of every process in an own unit's cgroup, and the PIDs alive when that
    was listed (None: not listed, every PID counts as alive)."""

    units: Mapping[int, str] = field(default_factory=dict)
    alive: frozenset[int] | None = None

    def present(self, pids: set[int]) -> set[int]:
        return set(pids) if self.alive is None else {p for p in pids if p in self.alive}


def owners_script(nonce: str) -> str:
    """Shell that prints `/proc/PID/cgroup:/.../UNIT.service` lines and then the PIDs
    alive (`@@ASCENDCTL-ALIVE 1 2 ...`) between markers."""
    assert re.fullmatch(r"[0-9a-f]{8,32}", nonce)
    return (f"printf '@@ASCENDCTL-OWNERS %s\\n' {nonce}\n"
            f"grep -H -o -E '{_UNIT_RE}' /proc/[0-9]*/cgroup 2>/dev/null | sort -u\n"
            "( cd /proc && printf '@@ASCENDCTL-ALIVE %s\\n' \"$(echo [0-9]*)\" )\n"
            f"printf '@@ASCENDCTL-OWNERS-END %s\\n' {nonce}\n")


def parse_owners(text: str) -> Owners:
    """The owners block of the gather output (empty Owners if absent)."""
    m = re.search(r"^@@ASCENDCTL-OWNERS (\S+)\n(.*?)^@@ASCENDCTL-OWNERS-END \1$", text,
                  re.MULTILINE | re.DOTALL)
    if not m:
        return Owners()
    units: dict[int, str] = {}
    alive: frozenset[int] | None = None
    for line in m.group(2).splitlines():
        line = line.strip()
        if line.startswith("@@ASCENDCTL-ALIVE"):
            alive = frozenset(int(p) for p in line.split()[1:] if p.isdigit())
            continue
        lm = re.match(r"^/proc/(\d+)/cgroup:.*?/([^/]+\.service)$", line)
        if lm:
            units[int(lm.group(1))] = lm.group(2)
    return Owners(units, alive)


def listening_pids(ss_text: str) -> dict[int, set[int]]:
    """port -> PIDs holding a listening socket on it, from `ss -Hltnp` (empty set: ss
    could not show the process, e.g. not root)."""
    out: dict[int, set[int]] = {}
    for line in ss_text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] != "LISTEN":
            continue
        _, _, port = parts[3].rpartition(":")
        if not port.isdigit():
            continue
        out.setdefault(int(port), set()).update(int(p) for p in re.findall(r"pid=(\d+)", line))
    return out


def own_holders(inv: Inventory, host: Host, owners: Owners, ss_text: str) -> OwnHolders:
    """NPU PIDs and launch ports of `host` that belong to our own units. A port whose
    holders `ss` listed are all in our units or gone since is not required to be free."""
    units = owners.units
    own_pids = {pid for pid, unit in units.items() if unit.startswith(OWN_UNIT_PREFIX)}
    listening = listening_pids(ss_text)
    ports: dict[int, str] = {}
    for use in ports_bound(inv, host):
        pids = listening.get(use.port)
        if not pids:
            continue
        allowed = {pid for pid, unit in units.items()
                   if unit.startswith(OWN_UNIT_PREFIX) or unit in use.owner_units}
        present = owners.present(pids)
        if not present:
            ports[use.port] = f"nothing any more (pid {' '.join(map(str, sorted(pids)))} exited)"
        elif present <= allowed:
            holders = sorted(present)
            names = sorted({units[p] for p in holders})
            ports[use.port] = f"{', '.join(names)} (pid {' '.join(map(str, holders))})"
    return OwnHolders(npu_pids=frozenset(own_pids), ports=ports)
