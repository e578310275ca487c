"""Environment variables a package reads: the keys of its registry dict (vLLM's
`environment_variables` in vllm/envs.py, vllm-ascend's `env_variables` in
vllm_ascend/envs.py) and every literal name read directly (`os.getenv("X")`,
`os.environ.get("X")`, `os.environ["X"]`, `"X" in os.environ`) anywhere in the package."""

from __future__ import annotations

import ast

from scripts.optionschema.sources import SourceTree


def registry(tree: SourceTree, path: str, name: str) -> set[str]:
    """The literal keys of the dict assigned to `name` in `path` (and added to it later)."""
    keys: set[str] = set()
    for node in ast.walk(tree.module(path)):
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id == name and isinstance(value, ast.Dict):
            keys.update(_string_keys(value))
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                and target.value.id == name and isinstance(target.slice, ast.Constant):
            keys.add(str(target.slice.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "update" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == name and node.args and isinstance(node.args[0], ast.Dict):
            keys.update(_string_keys(node.args[0]))
    return keys


def direct_reads(tree: SourceTree, prefix: str) -> set[str]:
    names: set[str] = set()
    for path in tree.paths(prefix):
        for node in ast.walk(tree.module(path)):
            name = _read_name(node)
            if name is not None:
                names.add(name)
    return names


def _string_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _is_environ(node: ast.expr) -> bool:
    return ast.unparse(node) in ("os.environ", "environ")


def _read_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = ast.unparse(node.func)
        if func in ("os.getenv", "getenv") or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and _is_environ(node.func.value)):
            return node.args[0].value
    if isinstance(node, ast.Subscript) and _is_environ(node.value) \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) \
            and isinstance(node.ctx, ast.Load):
        return node.slice.value
    if isinstance(node, ast.Compare) and len(node.ops) == 1 \
            and isinstance(node.ops[0], (ast.In, ast.NotIn)) and _is_environ(node.comparators[0]) \
            and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        return node.left.value
    return None
