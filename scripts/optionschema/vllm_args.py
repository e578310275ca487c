"""The option strings of `vllm serve`, read from a vLLM source tree with ast (vLLM is not
imported: it needs torch and a device).

`vllm serve` builds its parser in `make_arg_parser` (vllm/entrypoints/openai/cli_args.py or
a sibling module): a few literal `add_argument` calls, `FrontendArgs.add_cli_args` (one
`--field-name` per dataclass field of FrontendArgs and its bases, plus the extra `flags`
that `_customize_cli_kwargs` sets) and `AsyncEngineArgs.add_cli_args` →
`EngineArgs.add_cli_args` (literal `add_argument` calls whose kwargs come from
`get_kwargs(SomeConfig)["field"]`). `get_kwargs` gives a bool field
`argparse.BooleanOptionalAction`, which also registers `--no-<name>` for each long option.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from scripts.optionschema.sources import SourceTree


@dataclass
class ServeOptions:
    flags: set[str] = field(default_factory=set)        # every option string
    deprecated: set[str] = field(default_factory=set)   # registered with deprecated=True
    unresolved: list[str] = field(default_factory=list)  # what the reader could not follow
    parser_module: str = ""


def serve_options(tree: SourceTree) -> ServeOptions:
    out = ServeOptions(flags={"-h", "--help"})   # argparse's own
    module, function = _make_arg_parser(tree)
    out.parser_module = module
    reader = _Reader(tree, out)
    reader.function(module, function, cls=None)
    return out


def _make_arg_parser(tree: SourceTree) -> tuple[str, ast.FunctionDef]:
    candidates = []
    for path in tree.paths("vllm/entrypoints/"):
        if not path.endswith("cli_args.py"):
            continue
        for node in tree.module(path).body:
            if isinstance(node, ast.FunctionDef) and node.name == "make_arg_parser":
                candidates.append((path, node))
    if len(candidates) != 1:
        raise SystemExit(f"make_arg_parser: expected one definition, found "
                         f"{[c[0] for c in candidates]}")
    return candidates[0]


class _Reader:
    def __init__(self, tree: SourceTree, out: ServeOptions):
        self.tree = tree
        self.out = out
        self.seen: set[tuple[str, str, str | None]] = set()
        self._classes: dict[tuple[str, str], tuple[str, ast.ClassDef] | None] = {}
        # vLLM >= 0.3x: get_kwargs turns `bool | str | None` into an optional-valued flag
        self.optional_value_flags = "type_hints == {bool, str, type(None)}" in tree.text(
            "vllm/engine/arg_utils.py")

    # -- classes -------------------------------------------------------------------------

    def find_class(self, name: str, near: str) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from module `near`: defined there, or anywhere under
        vllm/ (vLLM's class names are unique enough for its config and args classes)."""
        key = (name, near)
        if key not in self._classes:
            self._classes[key] = self._find_class(name, near)
        return self._classes[key]

    def _find_class(self, name: str, near: str) -> tuple[str, ast.ClassDef] | None:
        found = _class_in(self.tree.module(near), name)
        if found is not None:
            return near, found
        for path in self.tree.defining("vllm/", name):
            found = _class_in(self.tree.module(path), name)
            if found is not None:
                return path, found
        return None

    def bases(self, module: str, cls: ast.ClassDef) -> Iterator[tuple[str, ast.ClassDef]]:
        """The class and its bases, nearest first (single inheritance as vLLM writes it)."""
        yield module, cls
        for base in cls.bases:
            if isinstance(base, ast.Name):
                found = self.find_class(base.id, module)
                if found is not None:
                    yield from self.bases(*found)

    def method(self, module: str, cls: ast.ClassDef, name: str
               ) -> tuple[str, ast.ClassDef, ast.FunctionDef] | None:
        for where, klass in self.bases(module, cls):
            for node in klass.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return where, klass, node
        return None

    def fields(self, module: str, cls: ast.ClassDef) -> dict[str, ast.expr]:
        """Dataclass fields (name → annotation) of a class and its bases."""
        result: dict[str, ast.expr] = {}
        for _where, klass in reversed(list(self.bases(module, cls))):
            for node in klass.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    if not _is_classvar(node.annotation):
                        result[node.target.id] = node.annotation
        return result

    def is_bool_field(self, module: str, cls_name: str, name: str) -> bool:
        found = self.find_class(cls_name, module)
        if found is None:
            self.out.unresolved.append(f"class {cls_name} (for field {name})")
            return False
        annotation = self.fields(*found).get(name)
        if annotation is None:
            return False
        return self.annotation_is_bool(annotation, found[0])

    def annotation_is_bool(self, annotation: ast.expr, module: str) -> bool:
        """get_kwargs: a dataclass type wins, then bool gives BooleanOptionalAction."""
        parts = list(_union_parts(annotation))
        names = [p.id for p in parts if isinstance(p, ast.Name)]
        if set(names) | {"None"} == {"bool", "str", "None"} and len(parts) == 3 \
                and self.optional_value_flags:
            return False   # `bool | str | None`: a flag with an optional value, no --no-
        if any(self._is_config_dataclass(n, module) for n in names if n != "bool"):
            return False
        return "bool" in names

    def _is_config_dataclass(self, name: str, module: str) -> bool:
        found = self.find_class(name, module)
        if found is None:
            return False
        return any(_decorator_name(d) in ("config", "dataclass") for d in found[1].decorator_list)

    # -- functions -----------------------------------------------------------------------

    def function(self, module: str, func: ast.FunctionDef, cls: tuple[str, ast.ClassDef] | None
                 ) -> None:
        key = (module, func.name, cls[1].name if cls else None)
        if key in self.seen:
            return
        self.seen.add(key)
        kwargs_of: dict[str, str] = {}     # variable → config class it came from (get_kwargs)
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                source = _get_kwargs_class(node.value)
                if source is not None:
                    kwargs_of[node.targets[0].id] = source
        for node in ast.walk(func):
            if isinstance(node, ast.For):
                self.field_loop(node, module, cls)
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr == "add_argument":
                self.add_argument(node, module, kwargs_of)
            elif node.func.attr == "add_cli_args":
                self.add_cli_args_call(node, module, cls)

    def add_argument(self, call: ast.Call, module: str, kwargs_of: dict[str, str]) -> None:
        strings = [a.value for a in call.args
                   if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dynamic = [a for a in call.args if not isinstance(a, ast.Constant)]
        if dynamic:
            return   # the field loop (field_loop) handles `*extra, f"--{key}"`
        options = [s for s in strings if s.startswith("-")]
        if not options:
            return   # a positional (model_tag)
        is_bool = False
        for keyword in call.keywords:
            if keyword.arg == "action":
                is_bool = _is_boolean_optional(keyword.value)
            elif keyword.arg == "deprecated" and _is_true(keyword.value):
                self.out.deprecated.update(options)
            elif keyword.arg is None:   # **kwargs["field"]
                source = _kwargs_subscript(keyword.value, kwargs_of)
                if source is not None and not any(k.arg == "action" for k in call.keywords) \
                        and not _overrides_action(keyword.value):
                    is_bool = self.is_bool_field(module, *source)
        self.out.flags.update(options)
        if is_bool:
            self.out.flags.update("--no-" + o[2:] for o in options if o.startswith("--"))

    def field_loop(self, loop: ast.For, module: str, cls: tuple[str, ast.ClassDef] | None
                   ) -> None:
        """`for key, value in kwargs.items(): group.add_argument(*extra, f"--{key...}", **value)`:
        one option per dataclass field of the class the method was called on."""
        calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]
        if not calls:
            return
        if cls is None:
            self.out.unresolved.append(f"{module}:{loop.lineno}: add_argument loop outside a class")
            return
        fields = self.fields(*cls)
        extra = self.extra_flags(*cls)
        for name, annotation in fields.items():
            option = "--" + name.replace("_", "-")
            self.out.flags.add(option)
            self.out.flags.update(extra.get(name, ()))
            if self.annotation_is_bool(annotation, cls[0]):
                self.out.flags.add("--no-" + option[2:])

    def extra_flags(self, module: str, cls: ast.ClassDef) -> dict[str, list[str]]:
        """`kwargs["field"]["flags"] = ["-x"]` in `_customize_cli_kwargs` of the class or a base."""
        extra: dict[str, list[str]] = {}
        for _where, klass in self.bases(module, cls):
            for node in ast.walk(klass):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                    continue
                target = node.targets[0]
                if isinstance(target, ast.Subscript) and _constant(target.slice) == "flags" \
                        and isinstance(target.value, ast.Subscript):
                    name = _constant(target.value.slice)
                    if isinstance(name, str) and isinstance(node.value, (ast.List, ast.Tuple)):
                        extra.setdefault(name, []).extend(
                            e.value for e in node.value.elts if isinstance(e, ast.Constant))
        return extra

    def add_cli_args_call(self, call: ast.Call, module: str,
                          cls: tuple[str, ast.ClassDef] | None) -> None:
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(owner, ast.Name):
            if owner.id == "cls" and cls is not None:
                target = cls
            else:
                found = self.find_class(owner.id, module)
                if found is None:
                    self.out.unresolved.append(f"{module}:{call.lineno}: {owner.id}.add_cli_args")
                    return
                target = found
        elif isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) \
                and owner.func.id == "super" and cls is not None:
            bases = list(self.bases(*cls))
            if len(bases) < 2:
                return
            target = bases[1]
        else:
            self.out.unresolved.append(f"{module}:{call.lineno}: add_cli_args on "
                                       f"{ast.unparse(call.func)}")
            return
        found_method = self.method(*target, "add_cli_args")
        if found_method is None:
            self.out.unresolved.append(f"{target[1].name}.add_cli_args not found")
            return
        where, _klass, method = found_method
        # `cls` inside the method is the class it was called on
        self.function(where, method, cls=target)


def _class_in(module: ast.Module, name: str) -> ast.ClassDef | None:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _is_classvar(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _union_parts(annotation: ast.expr) -> Iterator[ast.expr]:
    """The members of X | Y, Optional[X], Union[X, Y], Annotated[X, ...] (recursively)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        yield from _union_parts(annotation.left)
        yield from _union_parts(annotation.right)
        return
    if isinstance(annotation, ast.Subscript):
        head = ast.unparse(annotation.value).rsplit(".", 1)[-1]
        inner = annotation.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        if head in ("Optional", "Union"):
            for item in items:
                yield from _union_parts(item)
            return
        if head == "Annotated":
            yield from _union_parts(items[0])
            return
    yield annotation


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node).rsplit(".", 1)[-1]


def _get_kwargs_class(value: ast.expr) -> str | None:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
            and value.func.id == "get_kwargs" and value.args \
            and isinstance(value.args[0], ast.Name):
        return value.args[0].id
    return None


def _kwargs_subscript(value: ast.expr, kwargs_of: dict[str, str]) -> tuple[str, str] | None:
    """`X["field"]`, also inside a dict display `{**X["field"], "default": None}`."""
    if isinstance(value, ast.Dict):
        for key, item in zip(value.keys, value.values):
            if key is None:
                found = _kwargs_subscript(item, kwargs_of)
                if found is not None:
                    return found
        return None
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        name = _constant(value.slice)
        if value.value.id in kwargs_of and isinstance(name, str):
            return kwargs_of[value.value.id], name
    return None


def _overrides_action(value: ast.expr) -> bool:
    """`{**X["field"], "action": ...}` replaces the BooleanOptionalAction."""
    return isinstance(value, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "action" for k in value.keys)


def _constant(node: ast.expr) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _is_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_boolean_optional(node: ast.expr) -> bool:
    return ast.unparse(node).endswith("BooleanOptionalAction")


def parser_features(tree: SourceTree) -> dict[str, bool]:
    """How FlexibleArgumentParser reads options: `allow_abbrev` (argparse's unique-prefix
    expansion, on unless the parser turns it off) and the `-O<level>` shorthand."""
    path = "vllm/utils/argparse_utils.py"
    if path not in tree.files:
        path = "vllm/utils/__init__.py"
    text = tree.text(path)
    return {
        "allow_abbrev": "allow_abbrev=False" not in text and '"allow_abbrev"] = False' not in text,
        "dash_o": 'startswith("-O")' in text,
    }
