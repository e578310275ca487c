"""`ascendctl facts` on a terminal: one row per host with what matters at a glance."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendctl.checks.versions import component_versions
from ascendctl.console import get_console, is_terminal

if TYPE_CHECKING:
    from ascendctl.facts import NodeFacts
    from ascendctl.inventory import Inventory
    from ascendctl.preflight.run import FactsResult


def facts_row(f: "NodeFacts") -> dict[str, str]:
    v = component_versions(f)
    info = f.npu_smi
    if info is None:
        npus = "npu-smi unavailable"
    elif not info.ok:
        npus = f"npu-smi: {info.error}"
    else:
        bad = [c for c in info.chips if (c.health or "OK") != "OK"]
        npus = (f"{len(info.npu_ids)} x {f.chip.model if f.chip else '?'}"
                + (f", {len(bad)} unhealthy" if bad else "")
                + (f", {len(info.processes)} proc" if info.processes else ""))
    ports = f.roce
    up = sum(1 for p in ports if p.link == "UP")
    mtus = sorted({p.mtu for p in ports if p.mtu})
    tls = sorted({int(p.tls_enabled) for p in ports if p.tls_enabled is not None})
    roce = (f"{up}/{len(ports)} up, MTU {'/'.join(map(str, mtus)) or '?'}, "
            f"TLS {'/'.join(map(str, tls)) or '?'}") if ports else "-"
    pings = f"{sum(p.ok for p in f.pings)}/{len(f.pings)}" if f.pings else "-"
    disk = (f"{f.disk.available_bytes / (1 << 30):.1f} GiB at {f.disk.mount_point}"
            if f.disk else "-")
    offset = f.clock.offset_s if f.clock else None
    py = f.python
    stack = " ".join(f"{k}={v[k]}" for k in ("python", "torch", "torch_npu", "vllm", "vllm_ascend")
                     if v.get(k)) if py else "-"
    return {"npus": npus, "driver": v.get("driver") or "-", "firmware": v.get("firmware") or "-",
            "cann": v.get("cann") or "-", "python": stack, "roce": roce, "pings": pings,
            "disk": disk, "clock": f"{offset:+.3f} s" if offset is not None else "-"}


def print_facts(inv: "Inventory", result: "FactsResult") -> None:
    import sys

    names = [h.name for h in inv.hosts if h.name in result.facts or h.name in result.failed]
    columns = ("npus", "driver", "firmware", "cann", "python", "roce", "pings", "disk", "clock")
    if not is_terminal(sys.stdout):
        for name in names:
            if name in result.failed:
                why, kind = result.failed[name]
                print(f"{name}: {'UNREACHABLE' if kind != 'failed' else 'FAILED'}: {why}")
                continue
            row = facts_row(result.facts[name])
            print(f"{name}: gathered in {result.durations[name]:.2f} s, "
                  f"{result.exec_counts.get(name, 0)} remote execution(s)")
            for col in columns:
                print(f"  {col:<9} {row[col]}")
        return
    from rich.markup import escape
    from rich.table import Table

    console = get_console()
    per_table = max(1, (console.width - 12) // 36)     # hosts side by side, ~36 columns each
    for start in range(0, len(names), per_table):
        chunk = names[start:start + per_table]
        table = Table(title=f"facts ({inv.path})" if start == 0 else None, title_justify="left")
        table.add_column("", style="bold", no_wrap=True)
        rows = {}
        for name in chunk:
            table.add_column(name, overflow="fold")
            if name in result.failed:
                why, kind = result.failed[name]
                rows[name] = {"npus": f"[bold red]{'unreachable' if kind != 'failed' else 'failed'}"
                                      f"[/bold red]: {escape(why)}"}
            else:
                rows[name] = {k: escape(v) for k, v in facts_row(result.facts[name]).items()}
                rows[name]["gather"] = (f"{result.durations[name]:.2f} s, "
                                        f"{result.exec_counts.get(name, 0)} remote execution(s)")
        for col in (*columns, "gather"):
            table.add_row(col, *[rows[n].get(col, "") for n in chunk])
        console.print(table)
