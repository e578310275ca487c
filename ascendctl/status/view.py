"""How `ascendctl status` looks on a terminal (Rich) and when piped (plain)."""

from __future__ import annotations

from typing import Any

from ascendctl.status.model import ClusterStatus, NodeStatus, SupervisorStatus, Verdict
from ascendctl.status.verdict import ago, short

VERDICT_STYLE = {Verdict.HEALTHY: "bold green", Verdict.DEGRADED: "bold yellow"}
METRIC_COLUMNS = (
    ("running", "vllm:num_requests_running"),
    ("waiting", "vllm:num_requests_waiting"),
    ("kv%", "vllm:kv_cache_usage_perc"),
    ("prompt tok", "vllm:prompt_tokens_total"),
    ("gen tok", "vllm:generation_tokens_total"),
)


def _npus(node: NodeStatus) -> str:
    if node.npu_error:
        return f"error: {node.npu_error[:60]}"
    if not node.chips:
        return "-"
    healthy = sum(1 for c in node.chips if c.health == "OK")
    used = sum(c.hbm_used_mb or 0 for c in node.chips)
    total = sum(c.hbm_total_mb or 0 for c in node.chips)
    util = max((c.aicore_pct or 0) for c in node.chips)
    temp = max((c.temp_c or 0) for c in node.chips)
    text = (f"{healthy}/{len(node.chips)} OK, HBM {used / 1024:.1f}/{total / 1024:.0f} GiB, "
            f"AICore ≤{util}%, ≤{temp}°C")
    if node.foreign:
        text += f", [red]{len(node.foreign)} foreign process(es)[/red]"
    return text


def _links(node: NodeStatus) -> str:
    if not node.links:
        return "-"
    up = sum(1 for state in node.links.values() if state == "UP")
    down = [str(p) for p, s in node.links.items() if s != "UP"]
    return f"{up}/{len(node.links)} UP" + (f" (down: {','.join(down)})" if down else "")


def _engine(node: NodeStatus) -> str:
    if not node.engine:
        return "not deployed"
    parts = []
    for unit in node.engine:
        style = "" if unit.state == "running" else "red"
        text = f"{short(unit.unit)} {unit.state}{ago(unit.ago_s)}"
        if unit.exit:
            text += f" ({unit.exit})"
        if unit.restarts:
            text += f", restarts {unit.restarts}"
        parts.append(f"[{style}]{text}[/{style}]" if style else text)
    return "; ".join(parts)


def _side(node: NodeStatus) -> str:
    engine = {u.unit for u in node.engine}
    return ", ".join(f"{short(unit)}={state.split('/')[0]}"
                     for unit, state in node.units.items() if unit not in engine) or "-"


def _metric(value: Any, name: str) -> str:
    if value is None:
        return "-"
    if name.endswith("_perc"):
        return f"{100 * value:.1f}"
    return f"{value:g}"


def _recovery(sup: SupervisorStatus) -> str:
    if not sup.running:
        return f"supervisor not running ({sup.unit_state or 'not installed'})"
    text = f"phase {sup.phase}, generation {sup.generation}"
    if sup.phase not in ("serving", None):
        text += f", attempt {sup.attempt}/{sup.max_attempts or '?'}"
    if sup.cause and sup.phase != "serving":
        text += f", cause: {sup.cause}"
    if sup.held:
        text += f"; held by {sup.held.get('by')}"
    text += f"; {sup.recoveries_total} recover{'y' if sup.recoveries_total == 1 else 'ies'}"
    if sup.last_recovery:
        text += (f" (last: {sup.last_recovery.get('seconds')} s after "
                 f"{str(sup.last_recovery.get('cause'))[:80]})")
    return text


def status_table(status: ClusterStatus):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    replicated = len(status.groups) > 1
    nodes = Table(title=f"cluster {status.cluster}", expand=False)
    columns = ("rank", "node", "release", "engine", "other units", "NPUs", "RoCE")
    for column in (("group",) + columns if replicated else columns):
        nodes.add_column(column)
    for node in status.nodes:
        first = (node.group,) if replicated else ()
        if not node.reachable:
            nodes.add_row(*first, str(node.rank), node.name, "-",
                          f"[red]unreachable: {node.error}[/red]", "-", "-", "-")
            continue
        nodes.add_row(*first, str(node.rank), node.name, node.release or "-", _engine(node),
                      _side(node), _npus(node), _links(node))
    parts: list[Any] = [nodes]
    heads = {n.name: n for n in status.nodes if n.reachable and n.probe is not None}
    engine = Table(title="serving" + ("" if replicated else
                                      f" on {status.groups[0].head}" if status.groups else ""),
                   expand=False)
    if replicated:
        engine.add_column("group")
        engine.add_column("head")
    engine.add_column("deep probe")
    for label, _name in METRIC_COLUMNS:
        engine.add_column(label, justify="right")
    rows = 0
    for group in status.groups:
        head = heads.get(group.head)
        if head is None:
            continue
        probe = head.probe or {}
        answer = f"ok in {probe.get('seconds', 0):.2f} s" if probe.get("ok") \
            else f"[red]{(probe.get('error') or 'failed')[:80]}[/red]"
        lead = (group.name, head.name) if replicated else ()
        engine.add_row(*lead, answer, *[_metric(head.metrics.get(name), name)
                                         for _l, name in METRIC_COLUMNS])
        rows += 1
    if rows:
        parts.append(engine)
    for group in status.groups:
        if group.supervisor is not None:
            prefix = f"recovery ({group.name}): " if replicated else "recovery: "
            parts.append(Text(prefix + _recovery(group.supervisor)))
    for group in status.groups:
        if group.envelope is not None:
            head = next((n for n in status.nodes if n.name == group.head), None)
            release = f" of {head.release}" if head is not None and head.release else ""
            prefix = f"envelope ({group.name}): " if replicated else "envelope: "
            parts.append(Text(f"{prefix}{group.envelope} requests at once (the load envelope"
                              f"{release}, measured on {group.head})"))
    if status.proxy is not None:
        parts.append(Text(f"proxy: nginx on {status.proxy.node}:{status.proxy.port} "
                          f"{status.proxy.state or 'unreachable'}"))
    if replicated:
        for group in status.groups:
            style = VERDICT_STYLE.get(group.verdict, "bold red")
            line = Text(f"group {group.name}: {group.verdict.value}", style=style)
            if group.reasons:
                line.append(" — " + "; ".join(group.reasons), style="")
            parts.append(line)
    for warning in status.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    style = VERDICT_STYLE.get(status.verdict, "bold red")
    line = Text(("service verdict: " if replicated else "verdict: ") + status.verdict.value,
                style=style)
    if status.reasons:
        line.append(" — " + "; ".join(status.reasons), style="")
    parts.append(line)
    return Group(*parts)
