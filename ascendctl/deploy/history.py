"""Release history across the cluster, in the style of `kubectl rollout history`."""

from __future__ import annotations

from typing import Any

from ascendctl.deploy.release import ALL_UNITS
from ascendctl.inventory import Inventory


def collect_history(inv: Inventory) -> dict[str, Any]:
    """Every node's releases and `current` (one call per node), the head's history."""
    from ascendctl.deploy.context import DeployContext
    from ascendctl.transport import SshPool

    context = DeployContext(inv)
    with SshPool(inv.hosts) as pool:
        results = pool.map(lambda conn: context.ops(inv.host(conn.name), conn)
                           .state(ALL_UNITS))
    states = {name: r.value for name, r in results.items() if r.ok}
    unreachable = {name: r.error for name, r in results.items() if not r.ok}
    head_state = states.get(inv.head.name) or next(iter(states.values()), {})
    releases: dict[str, dict[str, Any]] = {}
    for node, state in states.items():
        for release in state.get("releases", []):
            entry = releases.setdefault(release["id"], {**release, "nodes": [],
                                                        "current_on": []})
            entry["nodes"].append(node)
            if state.get("current") == release["id"]:
                entry["current_on"].append(node)
            if release["status"] == "failed":
                entry["status"] = "failed"
    events = head_state.get("history", [])
    for event in events:
        entry = releases.get(event.get("release"))
        if entry is not None and event.get("event") == "failed":
            entry["failure"] = (f"{event.get('step')} on {event.get('node')}: "
                                f"{event.get('reason')}")
    ordered = sorted(releases.values(), key=lambda r: r.get("created") or "")
    for revision, entry in enumerate(ordered, start=1):
        entry["revision"] = revision
    currents = {node: state.get("current") for node, state in states.items()}
    return {
        "cluster": inv.cluster.name,
        "current": currents,
        "consistent": len(set(currents.values())) <= 1 and not unreachable,
        "releases": ordered,
        "events": events,
        "unreachable": unreachable,
    }


def history_table(data: dict[str, Any]):
    from rich.table import Table

    table = Table(title=f"release history of {data['cluster']}", show_lines=False)
    for column in ("rev", "release", "status", "created", "by", "layout", "current on",
                   "note"):
        table.add_column(column)
    for entry in data["releases"]:
        summary = entry.get("summary") or {}
        layout = (f"{summary.get('mode')} tp{summary.get('tp')} pp{summary.get('pp')} "
                  f"dp{summary.get('dp')}" if summary else "")
        status = entry["status"]
        style = {"active": "green", "failed": "red"}.get(status, "")
        table.add_row(str(entry["revision"]), entry["id"],
                      f"[{style}]{status}[/{style}]" if style else status,
                      entry.get("created") or "", entry.get("by") or "", layout,
                      ", ".join(entry["current_on"]), entry.get("failure", ""))
    if not data["consistent"]:
        table.caption = ("nodes disagree: " + ", ".join(
            f"{n}={c}" for n, c in data["current"].items())
            + "".join(f"; {n} unreachable: {e}" for n, e in data["unreachable"].items()))
    return table
