"""The import graph between packages has layers: no package imports one that imports it
back, directly or round a longer loop. Every import counts (function-local and
TYPE_CHECKING ones too: a lazy import hides a cycle, it does not remove it). A unit is a
subpackage or top-level module of ascendctl (`ascendctl.inventory`, `ascendctl.errors`),
the node runtime (`ascendctl_runtime`) or the lab (`ascendctl_lab`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"ascendctl": ROOT / "ascendctl", "ascendctl_runtime": ROOT / "runtime" / "ascendctl_runtime",
           "ascendctl_lab": ROOT / "ascendctl_lab"}

Edges = dict[tuple[str, str], list[str]]


def module_name(top: str, base: Path, path: Path) -> str:
    parts = [top, *path.relative_to(base).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in SOURCES:
        return None
    return ".".join(parts[:2]) if parts[0] == "ascendctl" else parts[0]


def imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
                     known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # `from ascendctl import errors` imports the module ascendctl.errors
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(sources: dict[str, Path] = SOURCES) -> tuple[set[str], Edges]:
    """The units and, for each edge between two of them, the file:line of every import."""
    files = {module_name(top, base, path): path
             for top, base in sources.items() if base.is_dir() for path in base.rglob("*.py")}
    units = {unit for unit in map(unit_of, files) if unit is not None}
    known = set(files)
    edges: Edges = defaultdict(list)
    for module, path in sorted(files.items()):
        source = unit_of(module)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in imported_modules(node, module, path.name == "__init__.py", known):
                unit = unit_of(target)
                if unit is not None and unit != source:
                    edges[(source, unit)].append(f"{where}:{node.lineno}")
    return units, dict(edges)


@lru_cache(maxsize=1)
def repository_graph() -> tuple[set[str], Edges]:
    return import_graph()


def strongly_connected(units: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[set[str]]:
    """Tarjan's components with more than one unit: the package cycles."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for other in graph[unit]:
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in on_stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == unit:
                    break
            if len(component) > 1:
                found.append(component)

    for unit in sorted(units):
        if unit not in index:
            visit(unit)
    return found


def layers(units: set[str], edges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Layer 0 imports no other unit; every unit sits one above the highest it imports."""
    below: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        below[a].add(b)
    layer: dict[str, int] = {}

    def of(unit: str) -> int:
        if unit not in layer:
            layer[unit] = 1 + max((of(b) for b in below[unit]), default=-1)
        return layer[unit]

    for unit in units:
        of(unit)
    return layer


def describe(cycles: list[set[str]], edges: Edges) -> str:
    lines = []
    for cycle in cycles:
        lines.append("cycle: " + " <-> ".join(sorted(cycle)))
        for (a, b), where in sorted(edges.items()):
            if a in cycle and b in cycle:
                lines.append(f"  {a} -> {b}: {', '.join(where)}")
    return "\n".join(lines)


def test_no_package_cycle_and_so_no_arrow_back_up():
    units, edges = repository_graph()
    cycles = strongly_connected(units, edges)
    assert not cycles, "\n" + describe(cycles, edges)
    layer = layers(units, edges)
    up = [f"{a} (layer {layer[a]}) -> {b} (layer {layer[b]})" for a, b in edges
          if layer[a] <= layer[b]]
    assert up == []
    assert layer["ascendctl.errors"] < layer["ascendctl.inventory"] < layer["ascendctl.cli"]


def test_only_the_cli_loads_the_lab():
    _, edges = repository_graph()
    assert {a for a, b in edges if b == "ascendctl_lab"} == {"ascendctl.cli"}
    assert all(where.startswith(("ascendctl/cli/lab.py:", "ascendctl/cli/demo.py:"))
               for (a, b), places in edges.items() if b == "ascendctl_lab" for where in places)


def test_the_graph_counts_function_local_and_relative_imports_and_finds_a_hidden_cycle(tmp_path):
    package = tmp_path / "ascendctl"
    for name, text in {
        "__init__.py": "",
        "low/__init__.py": "from . import util\n",
        "low/util.py": "def helper():\n    from ascendctl.high import api  # the hidden back arrow\n",
        "high/__init__.py": "",
        "high/api.py": "from ..low.util import helper\nfrom ascendctl import errors\n",
        "errors.py": "",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    units, edges = import_graph({"ascendctl": package})
    assert units == {"ascendctl", "ascendctl.low", "ascendctl.high", "ascendctl.errors"}
    assert edges[("ascendctl.low", "ascendctl.high")] == [f"{package}/low/util.py:2"]
    assert edges[("ascendctl.high", "ascendctl.low")] == [f"{package}/high/api.py:1"]
    assert ("ascendctl.high", "ascendctl.errors") in edges
    (cycle,) = strongly_connected(units, edges)
    assert cycle == {"ascendctl.low", "ascendctl.high"}
    assert "low/util.py:2" in describe([cycle], edges)
