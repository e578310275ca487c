"""The engine kinds are decided in one place, and the engine package sits in one layer.

Read from the package source with ast (nothing imported): every comparison of an engine
kind with a kind's name outside ascendctl/engine/kinds/, and the package import graph with
every import (module level, function-local, TYPE_CHECKING)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from ascendctl.engine.kinds import REGISTRY

PACKAGE = Path(__file__).resolve().parents[2] / "ascendctl"
KINDS_DIR = PACKAGE / "engine" / "kinds"


def _names(node: ast.AST) -> set[str]:
    """The string constants of a constant or a tuple/list/set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _mentions_kind(node: ast.AST) -> bool:
    """`x.kind`, a name with `kind` in it, or a `"kind"` key (`record.get("kind")`)."""
    return any((isinstance(n, ast.Attribute) and n.attr == "kind")
               or (isinstance(n, ast.Name) and "kind" in n.id)
               or (isinstance(n, ast.Constant) and n.value == "kind") for n in ast.walk(node))


def kind_branches(source: str, kind_names: set[str], kind_classes: set[str]) -> list[tuple[int, str]]:
    """(line, code) of every decision on an engine kind: a comparison (==, !=, in, not in)
    of something named kind with a kind's name, a match case on a kind's name, an
    isinstance of a kind class, a dict keyed by two or more kinds' names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if any(_names(s) & kind_names for s in sides) and \
                    any(_mentions_kind(s) for s in sides if not _names(s)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and _names(node.value) & kind_names:
            found.append((node.lineno, ast.unparse(node.value)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "isinstance" and len(node.args) == 2 and any(
                    isinstance(n, ast.Name) and n.id in kind_classes
                    for n in ast.walk(node.args[1])):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and len(
                {k.value for k in node.keys if isinstance(k, ast.Constant)} & kind_names) >= 2:
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def _kind_vocabulary() -> tuple[set[str], set[str]]:
    return set(REGISTRY), {type(kind).__name__ for kind in REGISTRY.values()}


def test_the_finder_sees_every_shape_of_kind_branch_and_nothing_else():
    names, classes = _kind_vocabulary()
    branches = kind_branches(
        "if spec.kind == 'container': pass\n"
        "if recorded.get('kind') in ('container', 'venv'): pass\n"
        "venv = exp.engine.kind != 'host'\n"
        "ok = isinstance(kind, ContainerKind)\n"
        "argv = {'host': a, 'venv': b}[inv.engine.kind]\n"
        "match spec.kind:\n    case 'venv':\n        pass\n"
        # not engine kinds: another kind's names, a host name, the kind field's own check
        "if kind == 'engine': pass\n"
        "if name == 'host': pass\n"
        "if kind == 'cap-add': pass\n"
        "data = {'host': h.name, 'port': 22}\n", names, classes)
    assert [line for line, _ in branches] == [1, 2, 3, 4, 5, 7]


def test_no_engine_kind_is_decided_outside_the_kinds_modules():
    names, classes = _kind_vocabulary()
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
                 for path in sorted(PACKAGE.rglob("*.py")) if KINDS_DIR not in path.parents
                 for line, code in kind_branches(path.read_text(encoding="utf-8"), names, classes)]
    assert offenders == [], "ask the engine's kind (ascendctl.engine.kinds) instead:\n" + \
        "\n".join(offenders)


def package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> where (file:line), for the top-level packages and
    modules of ascendctl; every import statement counts, wherever it is."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        source = parts[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                target = module.split(".")
                if target[0] == "ascendctl" and len(target) > 1 and target[1] != source:
                    edges[source][target[1]].append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return edges


def _reachable(edges, start: str, leave_out: frozenset[str]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in edges.get(todo.pop(), {}):
            if target not in seen and target not in leave_out:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_engine_is_in_no_package_cycle():
    """inventory (the engine: section's plain fields) -> engine (kinds) -> render, checks,
    deploy, preflight: nothing the engine imports leads back to it. The inventory's
    own cycle through the quality package (inventory/quality.py) is the general layering
    test's; paths through quality are left out here."""
    edges = package_imports()
    for lower, higher in (("inventory", "engine"), ("engine", "render"),
                          ("engine", "checks")):
        assert higher not in edges[lower], \
            f"{lower} imports {higher}: " + ", ".join(edges[lower][higher])
    below = _reachable(edges, "engine", frozenset({"quality"}))
    back = sorted(p for p in below if "engine" in _reachable(edges, p, frozenset({"quality"})))
    assert back == [], "packages the engine imports that import it again: " + "; ".join(
        f"{p} (engine -> {p}: {edges['engine'][p][0] if p in edges['engine'] else 'indirect'})"
        for p in back)
    assert {"inventory", "weights", "transport", "facts"} <= below
    assert {"render", "checks", "deploy", "preflight"}.isdisjoint(below)
