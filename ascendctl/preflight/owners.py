"""Our own running units, so that a preflight before a second deploy passes.

On a re-deploy the engine of the current release still holds the NPUs and the launch
ports. The gather round trip also lists every process in the cgroup of an
`ascendctl-*.service` unit (and of nginx.service, the head's proxy), read from
/proc/PID/cgroup - the unit's whole cgroup, so worker processes count, not only the
MainPID. Their PIDs may hold NPUs (`npu.processes`), and a launch port held only by
them is not required to be free (`host.ports`); the report lists what was allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ascendctl.inventory import Host, Inventory
from ascendctl.preflight.expectations import OwnHolders
from ascendctl.preflight.launch import OWN_UNIT_PREFIX, ports_bound

_UNIT_RE = r"/(ascendctl-[A-Za-z0-9_.@-]+|nginx)\.service"


def owners_script(nonce: str) -> str:
    """Shell that prints `/proc/PID/cgroup:/.../UNIT.service` lines between markers."""
    assert re.fullmatch(r"[0-9a-f]{8,32}", nonce)
    return (f"printf '@@ASCENDCTL-OWNERS %s\\n' {nonce}\n"
            f"grep -H -o -E '{_UNIT_RE}' /proc/[0-9]*/cgroup 2>/dev/null | sort -u\n"
            f"printf '@@ASCENDCTL-OWNERS-END %s\\n' {nonce}\n")


def parse_owners(text: str) -> dict[int, str]:
    """PID -> unit name from the owners block of the gather output ({} if absent)."""
    m = re.search(r"^@@ASCENDCTL-OWNERS (\S+)\n(.*?)^@@ASCENDCTL-OWNERS-END \1$", text,
                  re.MULTILINE | re.DOTALL)
    if not m:
        return {}
    owners: dict[int, str] = {}
    for line in m.group(2).splitlines():
        lm = re.match(r"^/proc/(\d+)/cgroup:.*?/([^/]+\.service)$", line.strip())
        if lm:
            owners[int(lm.group(1))] = lm.group(2)
    return owners


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


def own_holders(inv: Inventory, host: Host, owners: Mapping[int, str],
                ss_text: str) -> OwnHolders:
    """NPU PIDs and launch ports of `host` that belong to our own units."""
    own_pids = {pid for pid, unit in owners.items() if unit.startswith(OWN_UNIT_PREFIX)}
    listening = listening_pids(ss_text)
    ports: dict[int, str] = {}
    for use in ports_bound(inv, host):
        pids = listening.get(use.port)
        if not pids:
            continue
        allowed = {pid for pid, unit in owners.items()
                   if unit.startswith(OWN_UNIT_PREFIX) or unit in use.owner_units}
        if pids <= allowed:
            holders = sorted(pids)
            units = sorted({owners[p] for p in holders})
            ports[use.port] = f"{', '.join(units)} (pid {' '.join(map(str, holders))})"
    return OwnHolders(npu_pids=frozenset(own_pids), ports=ports)
