"""Release history across the cluster, in the style of `kubectl rollout history`."""

from __future__ import annotations

from typing import Any

from ascendctl_runtime.layout import ALL_UNITS

from ascendctl.benchmark.run import headline_from_record, stored_results
from ascendctl.deploy.nodeops import NodeOps
from ascendctl.deploy.nodestate import NodeState
from ascendctl.errors import AscendctlError
from ascendctl.inventory import Inventory
from ascendctl.quality.gate import latest_gate_results
from ascendctl.transport import SshPool
from ascendctl.transport.nodecall import call_node

PROMOTION_ENTRY = "promotion_store"
PROMOTION_TIMEOUT_S = 60.0
GATES = ("regression", "long_tail", "soak", "envelope")
SUMMARY_CHARS = 300


def collect_history(inv: Inventory) -> dict[str, Any]:
    """Every node's releases and `current` (one call per node), the head's history."""
    with SshPool(inv.hosts) as pool:
        results = pool.map(lambda conn: NodeOps.for_host(inv, inv.host(conn.name), conn)
                           .state(ALL_UNITS))
        bench = _bench_records(inv, pool) if results[inv.head.name].ok else {}
        gates = _gate_records(inv, pool) if results[inv.head.name].ok else {}
        promotion = _promotion_records(inv, pool) if results[inv.head.name].ok else {}
    states: dict[str, NodeState] = {name: r.value for name, r in results.items()
                                    if r.ok and r.value is not None}
    unreachable = {name: r.error for name, r in results.items() if not r.ok}
    head_state = states.get(inv.head.name) or next(iter(states.values()), None)
    releases: dict[str, dict[str, Any]] = {}
    for node, state in states.items():
        for release in state.releases:
            entry = releases.setdefault(release.id, {**release.as_dict(), "nodes": [],
                                                     "current_on": []})
            entry["nodes"].append(node)
            if state.current == release.id:
                entry["current_on"].append(node)
            if release.status == "failed":
                entry["status"] = "failed"
    events = list(head_state.history) if head_state else []
    # maintenance (ascendctl node drain|undrain, the fault policy) is recorded on its node
    events += [e for name, state in states.items() if state is not head_state
               for e in state.history if e.get("event") in MAINTENANCE_EVENTS]
    events.sort(key=lambda e: str(e.get("time") or ""))
    # each serving group's head records its own group's failures
    heads = [states[h.name] for h in inv.heads if h.name in states]
    for event in [e for state in heads for e in state.history]:
        failed = releases.get(str(event.get("release")))
        if failed is not None and event.get("event") == "failed":
            group = f" (serving group {event['group']})" if event.get("group") else ""
            failed["failure"] = (f"{event.get('step')} on {event.get('node')}{group}: "
                                f"{event.get('reason')}")
    for release_id, records in bench.items():
        if release_id in releases and records:
            releases[release_id]["bench"] = headline_from_record(records[-1])
    for release_id, gate in gates.items():
        if release_id in releases:
            releases[release_id]["quality"] = gate
    for release_id, by_gate in promotion.items():
        if release_id in releases:
            releases[release_id]["promotion"] = by_gate
    ordered = sorted(releases.values(), key=lambda r: r.get("created") or "")
    for revision, entry in enumerate(ordered, start=1):
        entry["revision"] = revision
    currents = {node: state.current for node, state in states.items()}
    groups = {g.name: sorted({currents.get(n) or "none" for n in g.hosts if n in currents})
              for g in inv.serving_groups}
    return {
        "cluster": inv.cluster.name,
        "current": currents,
        "groups": groups,
        # every serving group on one release (the groups may differ after a stopped rollout)
        "consistent": all(len(r) <= 1 for r in groups.values()) and not unreachable,
        "releases": ordered,
        "events": events,
        "maintenance": {name: state.maintenance for name, state in states.items()
                        if state.maintenance},
        "unreachable": unreachable,
    }


MAINTENANCE_EVENTS = ("drained", "isolated", "undrained")


def _bench_records(inv: Inventory, pool: "SshPool") -> dict[str, list[dict[str, Any]]]:
    """`ascendctl bench` results kept on the head, by release (see ascendctl/benchmark)."""
    try:
        return stored_results(inv, pool.conn(inv.head.name))
    except AscendctlError:
        return {}


def _gate_records(inv: Inventory, pool: Any) -> dict[str, dict[str, Any]]:
    """The latest quality gate result of each release, kept on each group's head
    (ascendctl/quality): a failure on any head wins over passes elsewhere, else the
    newest."""
    merged: dict[str, dict[str, Any]] = {}
    for head in inv.heads:
        try:
            found = latest_gate_results(inv, pool.conn(head.name), node=head)
        except AscendctlError:
            continue
        for release, gate in found.items():
            have = merged.get(release)
            if have is None or (gate.get("status") == "fail") > (have.get("status") == "fail") \
                    or ((gate.get("status") == "fail") == (have.get("status") == "fail")
                        and str(gate.get("stamp") or "") > str(have.get("stamp") or "")):
                merged[release] = gate
    return merged


def _promotion_records(inv: Inventory, pool: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """The latest promotion evidence of each release and gate, kept on each group's head
    (runtime promotion_store.py), merged as the quality gate's are."""
    found: dict[str, list[dict[str, Any]]] = {}
    for head in inv.heads:
        try:
            answer = call_node(pool.conn(head.name), node=head.name,
                               python=inv.deploy.python, entry=PROMOTION_ENTRY,
                               timeout=PROMOTION_TIMEOUT_S,
                               request={"op": "list", "kwargs": {"root": inv.deploy.root,
                                                                 "latest_per_gate": True}})
        except AscendctlError:
            continue
        for release, records in (answer.get("records") or {}).items():
            found.setdefault(str(release), []).extend(
                {**r, "head": head.name} for r in records if isinstance(r, dict))
    return {release: latest_per_gate(records) for release, records in found.items()}


def latest_per_gate(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each gate's record to show, by gate: a failure on any head wins over passes
    elsewhere, else the newest (by stamp). Pure."""
    chosen: dict[str, dict[str, Any]] = {}
    for record in records:
        gate = str(record.get("gate") or "?")
        have = chosen.get(gate)
        failed = record.get("status") == "fail"
        if have is None or (failed, str(record.get("stamp") or "")) > \
                (have.get("status") == "fail", str(have.get("stamp") or "")):
            chosen[gate] = record
    ordered = [g for g in GATES if g in chosen] + sorted(g for g in chosen if g not in GATES)
    return {gate: chosen[gate] for gate in ordered}


def history_table(data: dict[str, Any]):
    from rich.table import Table

    table = Table(title=f"release history of {data['cluster']}", show_lines=False)
    for column in ("rev", "release", "status", "created", "by", "layout", "engine", "current on",
                   "latest bench", "quality gate", "promotion", "note"):
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
                      engine_cell(summary.get("engine")), ", ".join(entry["current_on"]), _bench_cell(entry.get("bench")),
                      _gate_cell(entry.get("quality")), promotion_cell(entry.get("promotion")),
                      entry.get("failure", ""))
    out = data.get("maintenance") or {}
    if out:
        from ascendctl.status.maintenance import describe

        table.caption = "; ".join(f"{node} {describe(record)}" for node, record in out.items())
    if not data["consistent"]:
        table.caption = (f"{table.caption}; " if out else "") + ("nodes disagree: " + ", ".join(
            f"{n}={c}" for n, c in data["current"].items())
            + "".join(f"; {n} unreachable: {e}" for n, e in data["unreachable"].items()))
    return table


def engine_cell(engine: dict[str, Any] | None) -> str:
    """`img-89aaa24b6b20 localhost/vllm:v1`, `venv-dc5fc0e63a1e`, `host` (or '' for a
    release made before engines were recorded)."""
    if not engine:
        return ""
    short = str(engine.get("short") or engine.get("kind") or "")
    image = engine.get("image")
    return f"{short} {image}" if image else short


def _bench_cell(bench: dict[str, Any] | None) -> str:
    if not bench:
        return ""
    figures = bench.get("figures") or {}

    def num(key: str, digits: int = 1) -> str:
        value = figures.get(key)
        return "-" if value is None else f"{value:.{digits}f}"

    return (f"{bench.get('verdict', '?')}: {num('output_tok_s_per_npu', 2)} tok/s/NPU, "
            f"p99 TTFT {num('p99_ttft_ms', 0)} ms, TPOT {num('p99_tpot_ms', 0)} ms "
            f"({bench.get('time', '')[:16]})")


def _gate_cell(gate: dict[str, Any] | None) -> str:
    if not gate:
        return ""
    counts = gate.get("counts") or {}
    agreement = gate.get("agreement") or {}
    figure = (f"agreement {agreement['mean']:.2f}" if agreement.get("mean") is not None
              else f"{counts.get('prompts', 0) - counts.get('failed', 0)}/"
                   f"{counts.get('prompts', 0)} prompts")
    return f"{gate.get('status', '?')}: {figure} ({(gate.get('time') or '')[:16]})"


def promotion_cell(gates: dict[str, dict[str, Any]] | None) -> str:
    """`regression pass, long_tail fail, envelope pass (16)`: each gate's latest status."""
    from rich.markup import escape

    from ascendctl.inventory.prompts import printable

    if not gates:
        return ""
    return escape(printable(", ".join(
        f"{gate} {record.get('status') or '?'}"
        + (f" ({record['envelope']})" if gate == "envelope"
           and record.get("envelope") is not None else "")
        for gate, record in gates.items())))


def promotion_table(data: dict[str, Any]):
    """Each release's latest promotion evidence per gate, and where it is kept (None when
    there is none)."""
    from rich.markup import escape as markup
    from rich.table import Table

    from ascendctl.inventory.prompts import printable, truncate

    def escape(value: Any) -> str:         # nothing from a node drives the terminal
        return markup(printable(str(value)))

    rows = [(entry, gate, record) for entry in data["releases"]
            for gate, record in (entry.get("promotion") or {}).items()]
    if not rows:
        return None
    table = Table(title="promotion evidence", show_lines=True)
    for column in ("release", "gate", "status", "envelope", "time"):
        table.add_column(column, no_wrap=True, overflow="fold")
    table.add_column("summary, and the evidence on the head", overflow="fold")
    for entry, gate, record in rows:
        status = str(record.get("status") or "?")
        style = {"pass": "green", "fail": "red"}.get(status, "")
        envelope = record.get("envelope")
        text = markup(truncate(str(record.get("summary") or ""), SUMMARY_CHARS))
        where = evidence_where(record)
        table.add_row(escape(entry["id"]), escape(gate),
                      f"[{style}]{status}[/{style}]" if style else escape(status),
                      "" if envelope is None else escape(envelope),
                      escape(str(record.get("time") or "")[:16]),
                      text + (f"\n{escape(where)}" if where else ""))
    return table


def evidence_where(record: dict[str, Any]) -> str:
    """`node0:/var/lib/ascendctl/promotion/R/STAMP.{json,html}`: where a record and its
    page are kept ('' when the record names no file)."""
    head, path, page = record.get("head"), record.get("file"), record.get("html")
    if not path:
        return ""
    where = f"{head}:{path}" if head else str(path)
    if not page:
        return where
    if str(path).endswith(".json") and page == str(path)[:-5] + ".html":
        return where[:-5] + ".{json,html}"
    return f"{where} {page}"
