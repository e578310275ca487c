"""The cluster's event log as `ascendctl events` shows it (read from the head)."""

from __future__ import annotations

from typing import Any

from ascendctl.errors import AscendctlError
from ascendctl.inventory import Inventory
from ascendctl.transport import SshPool
from ascendctl.transport.nodecall import call_node
from ascendctl.transport.results import HostStatus


def read_events(inv: Inventory, *, tail: int) -> list[dict[str, Any]]:
    """The last TAIL events of the head's history.jsonl (one remote execution). Raises
    ConnectionError when the head cannot be reached."""
    head = inv.head
    with SshPool([head]) as pool:
        result = pool.map(lambda conn: call_node(
            conn, node=head.name, python=inv.deploy.python, entry="status_node",
            request={"op": "events", "root": inv.deploy.root, "kwargs": {"tail": tail}},
            timeout=60))[head.name]
    if not result.ok:
        if result.status == HostStatus.UNREACHABLE:
            raise ConnectionError(result.error)

        raise AscendctlError(f"{head.name}: {result.error}")
    return list((result.value or {}).get("events", []))


def describe(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "recovery":
        stage = event.get("stage")
        text = {"started": f"cause: {event.get('cause')}",
                "attempt-failed": f"attempt {event.get('attempt')} failed: {event.get('reason')}",
                "retry": f"attempt {event.get('attempt')} after {event.get('backoff_s')} s "
                         "back-off",
                "recovered": f"serving again {event.get('seconds')} s after the failure "
                             f"(attempt {event.get('attempt')})",
                "gave-up": f"gave up: {event.get('reason')}",
                "serving-again": str(event.get("reason")),
                }.get(str(stage), str(event.get("reason") or ""))
        return text
    if kind == "failed":
        return f"{event.get('step')} on {event.get('node')}: {event.get('reason')}"
    if kind in ("deployed", "rollback"):
        return f"from {event.get('previous') or 'nothing'} by {event.get('by')}"
    return str(event.get("reason") or event.get("verdict") or "")


def events_table(cluster: str, events: list[dict[str, Any]]):
    from rich.table import Table

    table = Table(title=f"events of {cluster}", show_lines=False)
    for column in ("time", "event", "stage", "release", "rank", "what"):
        table.add_column(column)
    for event in events:
        rank = "" if event.get("rank") is None else f"{event.get('rank')} ({event.get('node')})"
        table.add_row(str(event.get("time") or ""), str(event.get("event") or ""),
                      str(event.get("stage") or ""), str(event.get("release") or ""), rank,
                      describe(event))
    return table
