"""How `ascendctl status` looks on a terminal (Rich) and when piped (plain)."""

from __future__ import annotations

from typing import Any

from ascendctl.status import DEGRADED, HEALTHY, ClusterStatus, NodeStatus

VERDICT_STYLE = {HEALTHY: "bold green", DEGRADED: "bold yellow"}
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
    return (f"{healthy}/{len(node.chips)} OK, HBM {used / 1024:.1f}/{total / 1024:.0f} GiB, "
            f"AICore ≤{util}%, ≤{temp}°C")


def _links(node: NodeStatus) -> str:
    if not node.links:
        return "-"
    up = sum(1 for state in node.links.values() if state == "UP")
    down = [str(p) for p, s in node.links.items() if s != "UP"]
    return f"{up}/{len(node.links)} UP" + (f" (down: {','.join(down)})" if down else "")


def _units(node: NodeStatus) -> str:
    if not node.units:
        return "not deployed"
    return ", ".join(f"{unit.removeprefix('ascendctl-').removesuffix('.service')}="
                     f"{state.split('/')[0]}" + (f" (restarts {node.restarts[unit]})"
                                                 if node.restarts.get(unit) else "")
                     for unit, state in node.units.items())


def _metric(value: Any, name: str) -> str:
    if value is None:
        return "-"
    if name.endswith("_perc"):
        return f"{100 * value:.1f}"
    return f"{value:g}"


def status_table(status: ClusterStatus):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    nodes = Table(title=f"cluster {status.cluster}", expand=False)
    for column in ("rank", "node", "release", "units", "NPUs", "RoCE"):
        nodes.add_column(column)
    for node in status.nodes:
        if not node.reachable:
            nodes.add_row(str(node.rank), node.name, "-", f"[red]unreachable: {node.error}[/red]",
                          "-", "-")
            continue
        nodes.add_row(str(node.rank), node.name, node.release or "-", _units(node),
                      _npus(node), _links(node))
    parts: list[Any] = [nodes]
    head = next((n for n in status.nodes if n.rank == 0), None)
    if head is not None and head.reachable and head.engine_up is not None:
        engine = Table(title=f"engine on {head.name}", expand=False)
        engine.add_column("API")
        for label, _name in METRIC_COLUMNS:
            engine.add_column(label, justify="right")
        engine.add_row("up" if head.engine_up else "[red]down[/red]",
                       *[_metric(head.metrics.get(name), name) for _l, name in METRIC_COLUMNS])
        parts.append(engine)
    style = VERDICT_STYLE.get(status.verdict, "bold red")
    line = Text(f"verdict: {status.verdict}", style=style)
    if status.reasons:
        line.append(" — " + "; ".join(status.reasons), style="")
    parts.append(line)
    return Group(*parts)
