"""What a vllm-ascend release reads from `--additional-config` (top-level keys), and what
it does with a key it does not know.

Two generations of vllm_ascend/ascend_config.py:
- `AscendConfig.__init__` reads keys with `additional_config.get("key", default)` (and
  other modules read a few more the same way): a key nobody reads is silently ignored.
- `@config class AscendConfig` (a pydantic dataclass; vllm_ascend/config_utils.py merges
  `extra="forbid"`): `init_ascend_config` strips `_NON_USER_INPUT_KEYS` and passes the rest
  as keyword arguments, so a key that is no field is refused at start-up (pydantic
  "Unexpected keyword argument"), unless vllm-omni is installed (then it is dropped with a
  warning).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from scripts.optionschema.sources import SourceTree

ASCEND_CONFIG = "vllm_ascend/ascend_config.py"
CONFIG_UTILS = "vllm_ascend/config_utils.py"


@dataclass
class AdditionalConfig:
    keys: set[str] = field(default_factory=set)
    # "parent.child" of the sub-configs that are pydantic dataclasses too (extra="forbid"):
    # a nested key they do not know is refused as well
    nested: set[str] = field(default_factory=set)
    unknown: str = "ignored"          # or "refused"
    source: str = ""                  # file:line that decides `unknown`


def additional_config(tree: SourceTree) -> AdditionalConfig:
    module = tree.module(ASCEND_CONFIG)
    cls = next((n for n in module.body if isinstance(n, ast.ClassDef)
                and n.name == "AscendConfig"), None)
    if cls is None:
        raise SystemExit(f"{tree.sdist.name}: no class AscendConfig in {ASCEND_CONFIG}")
    out = AdditionalConfig()
    if any(_decorator(d) == "config" for d in cls.decorator_list):
        out.keys = _dataclass_fields(cls) | _non_user_input_keys(module)
        out.nested = _nested_fields(module, cls)
        line = _forbid_line(tree)
        out.unknown = "refused" if line else "ignored"
        out.source = f"{CONFIG_UTILS}:{line}" if line else f"{ASCEND_CONFIG}:{cls.lineno}"
    else:
        out.keys = reads(tree)
        out.source = f"{ASCEND_CONFIG}:{cls.lineno}"
    return out


def reads(tree: SourceTree) -> set[str]:
    """Every literal top-level key read from an `additional_config` mapping anywhere in
    vllm_ascend: `.get("k")`, `.setdefault("k")`, `.pop("k")`, `["k"]`, `"k" in ...`."""
    keys: set[str] = set()
    for path in tree.paths("vllm_ascend/"):
        for func in ast.walk(tree.module(path)):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                keys |= _reads_in(func)
    return keys


def _reads_in(scope: ast.AST) -> set[str]:
    aliases = {"additional_config"}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and _is_mapping(node.value, aliases):
            aliases.add(node.targets[0].id)
    keys: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "setdefault", "pop") and node.args \
                and _is_mapping(node.func.value, aliases):
            key = _string(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_mapping(node.value, aliases):
            key = _string(node.slice)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _is_mapping(node.comparators[0], aliases):
            key = _string(node.left)
        elif isinstance(node, ast.Call) and any(_is_mapping(a, aliases) for a in node.args):
            # a helper that reads the key it is given: `_get_config_value(sub,
            # additional_config, "short_request_first_config", {})`
            keys.update(s for s in map(_string, node.args)
                        if s and s.isidentifier() and not s.isupper())
            continue
        else:
            continue
        if key is not None:
            keys.add(key)
    return keys


def _is_mapping(node: ast.expr, aliases: set[str]) -> bool:
    """Whether an expression evaluates to the additional_config mapping itself."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    if isinstance(node, ast.Attribute):
        return node.attr == "additional_config"
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" \
            and len(node.args) >= 2 and _string(node.args[1]) == "additional_config":
        return True
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return _is_mapping(node.values[0], aliases)
    if isinstance(node, ast.IfExp):
        return _is_mapping(node.body, aliases)
    return False


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _decorator(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node).rsplit(".", 1)[-1]


def _dataclass_fields(cls: ast.ClassDef) -> set[str]:
    names = set()
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or ast.unparse(node.annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        if name == "model_config":
            continue
        if isinstance(node.value, ast.Call) and any(
                k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.value.keywords):
            continue
        names.add(name)
    return names


def _nested_fields(module: ast.Module, cls: ast.ClassDef) -> set[str]:
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)
               and any(_decorator(d) == "config" for d in n.decorator_list)}
    nested = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.annotation, ast.Name) and node.annotation.id in classes:
            for child in _dataclass_fields(classes[node.annotation.id]):
                nested.add(f"{node.target.id}.{child}")
    return nested


def _non_user_input_keys(module: ast.Module) -> set[str]:
    """The keys init_ascend_config strips before validation (accepted, not fields)."""
    keys: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == "_NON_USER_INPUT_KEYS" and isinstance(node.value, ast.Set):
            keys |= {e.value for e in node.value.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)
                     and not e.value.startswith("_")}
    return keys


def _forbid_line(tree: SourceTree) -> int | None:
    if CONFIG_UTILS not in tree.files:
        return None
    for number, line in enumerate(tree.text(CONFIG_UTILS).splitlines(), 1):
        if 'extra="forbid"' in line and "ConfigDict" in line:
            return number
    return None
