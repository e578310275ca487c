"""Jinja2 for playbooks, always sandboxed.

Expressions (`when`, `until`, `changed_when`, `failed_when`, `assert: that`), templated
module arguments and template files are all evaluated by an
ImmutableSandboxedEnvironment with StrictUndefined: a playbook cannot reach Python
internals or mutate data, and a misspelt variable is an error, never an empty string.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ascendctl.errors import AscendctlError
from ascendctl.facts.versions import parse_version

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.S)


class TemplateError(AscendctlError):
    """A template or expression failed (syntax, undefined variable, sandbox violation)."""


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


def contains_template(value: Any) -> bool:
    if isinstance(value, str):
        return is_template(value)
    if isinstance(value, Mapping):
        return any(contains_template(k) or contains_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(contains_template(v) for v in value)
    return False


# -- filters and tests -------------------------------------------------------------------

def _quote(value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)) or value is None:
        raise TemplateError(f"quote: expected text or a number, got {type(value).__name__}")
    if isinstance(value, bool):
        value = str(value).lower()
    return shlex.quote(str(value))


def _systemd_quote(value: Any) -> str:
    """One word of a systemd command line (ExecStart=...): double-quoted, with `%`
    specifiers and `$` variables neutralised, so a value can neither split the line
    (a `;` word starts another command there) nor expand anything."""
    if isinstance(value, (Mapping, list, tuple)) or value is None:
        raise TemplateError(f"systemd_quote: expected text, got {type(value).__name__}")
    text = str(value)
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise TemplateError("systemd_quote: control characters cannot be quoted for systemd")
    text = (text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
            .replace("$", "$$"))
    return f'"{text}"'


def _to_yaml(value: Any, **kwargs: Any) -> str:
    import yaml

    return yaml.safe_dump(_plain(value), sort_keys=False, default_flow_style=False, **kwargs)


def _from_yaml(value: str) -> Any:
    import yaml

    return yaml.safe_load(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def _regex_search(value: str, pattern: str, group: int | str = 0) -> Any:
    match = re.search(pattern, str(value))
    return match.group(group) if match else None


def _regex_replace(value: str, pattern: str, repl: str = "") -> str:
    return re.sub(pattern, repl, str(value))


def _mandatory(value: Any, msg: str | None = None) -> Any:
    from jinja2 import Undefined

    if isinstance(value, Undefined):
        raise TemplateError(msg or "a mandatory variable is undefined")
    return value


def _version_key(text: Any) -> Any:
    try:
        return parse_version(str(text)).key
    except Exception:  # noqa: BLE001 - fall back to a plain numeric split
        return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-+]", str(text)))


def _test_version(value: Any, other: Any, op: str = "==") -> bool:
    a, b = _version_key(value), _version_key(other)
    ops = {"==": a == b, "eq": a == b, "!=": a != b, "ne": a != b, "<": a < b, "lt": a < b,
           "<=": a <= b, "le": a <= b, ">": a > b, "gt": a > b, ">=": a >= b, "ge": a >= b}
    if op not in ops:
        raise TemplateError(f"version test: unknown operator {op!r}")
    return ops[op]


def _result_flag(flag: str) -> Any:
    def test(value: Any) -> bool:
        if not isinstance(value, Mapping):
            raise TemplateError(f"'{flag}' test needs a registered task result")
        if flag == "succeeded":
            return not value.get("failed", False)
        return bool(value.get(flag, False))

    return test


def _extract(item: Any, container: Any, morekeys: Any = None) -> Any:
    """Ansible's extract: `hosts | map('extract', hostvars, 'mtu')`."""
    value = container[item]
    keys = [] if morekeys is None else morekeys if isinstance(morekeys, list) else [morekeys]
    for key in keys:
        value = value[key]
    return value


FILTERS: dict[str, Any] = {
    "extract": _extract,
    "quote": _quote,
    "systemd_quote": _systemd_quote,
    "to_json": lambda v, **kw: json.dumps(_plain(v), **kw),
    "to_nice_json": lambda v: json.dumps(_plain(v), indent=2, sort_keys=True),
    "from_json": json.loads,
    "to_yaml": _to_yaml,
    "from_yaml": _from_yaml,
    "b64encode": lambda v: base64.b64encode(str(v).encode()).decode(),
    "b64decode": lambda v: base64.b64decode(str(v)).decode(),
    "basename": lambda v: os.path.basename(str(v)),
    "dirname": lambda v: os.path.dirname(str(v)),
    "bool": _to_bool,
    "regex_search": _regex_search,
    "regex_replace": _regex_replace,
    "regex_findall": lambda v, p: re.findall(p, str(v)),
    "mandatory": _mandatory,
}

TESTS: dict[str, Any] = {
    "version": _test_version,
    "succeeded": _result_flag("succeeded"),
    "success": _result_flag("succeeded"),
    "failed": _result_flag("failed"),
    "changed": _result_flag("changed"),
    "skipped": _result_flag("skipped"),
    "match": lambda v, p: re.match(p, str(v)) is not None,
    "search": lambda v, p: re.search(p, str(v)) is not None,
}


# -- the environment ---------------------------------------------------------------------

class Templar:
    """Renders expressions, argument values and template files in one sandbox."""

    def __init__(self, search_path: Sequence[Path] = ()):
        self.search_path = [Path(p) for p in search_path]
        self._env: Any = None
        self._lock = threading.Lock()
        self._expr_cache: dict[str, Any] = {}
        self._str_cache: dict[str, Any] = {}

    @property
    def env(self) -> Any:
        with self._lock:
            if self._env is None:
                from jinja2 import FileSystemLoader, StrictUndefined
                from jinja2.sandbox import ImmutableSandboxedEnvironment

                env = ImmutableSandboxedEnvironment(
                    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True,
                    trim_blocks=True, lstrip_blocks=True,
                    loader=FileSystemLoader([str(p) for p in self.search_path]))
                env.filters.update(FILTERS)
                env.tests.update(TESTS)
                self._env = env
            return self._env

    # -- load-time checks -----------------------------------------------------------------

    def check_expression(self, source: str) -> None:
        """Raise TemplateError when `source` is not a valid expression."""
        self._compile_expression(source)

    def check_template(self, source: str) -> None:
        if is_template(source):
            self._compile_string(source)

    def unquoted_outputs(self, source: str) -> list[str]:
        """The `{{ ... }}` outputs of a shell script that do not end in `| quote`."""
        from jinja2 import nodes

        try:
            tree = self.env.parse(source)
        except Exception as exc:  # noqa: BLE001
            raise TemplateError(_describe(exc)) from None
        bad: list[str] = []
        for output in tree.find_all(nodes.Output):
            for node in output.nodes:
                if isinstance(node, nodes.TemplateData):
                    continue
                if isinstance(node, nodes.Filter) and node.name == "quote":
                    continue
                bad.append(_node_source(source, node))
        return bad

    # -- evaluation -----------------------------------------------------------------------

    def expr(self, source: str | bool, variables: Mapping[str, Any]) -> Any:
        """Evaluate a bare expression such as `result.rc == 0 and inventory_hostname != 'x'`."""
        if isinstance(source, bool):
            return source
        fn = self._compile_expression(source)
        try:
            return _unwrap(fn(**variables))
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - jinja raises many kinds
            raise TemplateError(f"{source!r}: {_describe(exc)}") from None

    def truth(self, source: str | bool | Sequence[str], variables: Mapping[str, Any]) -> bool:
        """All conditions true (a list is AND-ed, like Ansible's `when`)."""
        if isinstance(source, (list, tuple)):
            return all(self.truth(item, variables) for item in source)
        if not isinstance(source, (str, bool)):
            raise TemplateError(f"{source!r}: a condition is text, a boolean or a list")
        return bool(self.expr(source, variables))

    def render(self, value: Any, variables: Mapping[str, Any]) -> Any:
        """Render templated strings inside any YAML value.

        A string that is exactly one `{{ expression }}` keeps the expression's type
        (a list stays a list); any other templated string becomes text.
        """
        if isinstance(value, str):
            if not is_template(value):
                return value
            single = _SINGLE_EXPR.match(value)
            if single and "{{" not in single.group("expr") and "}}" not in single.group("expr"):
                return self.expr(single.group("expr"), variables)
            template = self._compile_string(value)
            try:
                return template.render(variables)
            except Exception as exc:  # noqa: BLE001
                raise TemplateError(f"{_short(value)}: {_describe(exc)}") from None
        if isinstance(value, Mapping):
            return {self.render(k, variables): self.render(v, variables)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.render(v, variables) for v in value]
        return value

    def render_file(self, name: str, variables: Mapping[str, Any]) -> str:
        """Render a template file found on the search path (templates/ first)."""
        from jinja2 import TemplateNotFound

        try:
            template = self.env.get_template(name)
        except TemplateNotFound:
            where = ", ".join(str(p) for p in self.search_path)
            raise TemplateError(f"template {name!r} not found (searched {where})") from None
        except Exception as exc:  # noqa: BLE001 - syntax errors
            raise TemplateError(f"template {name}: {_describe(exc)}") from None
        try:
            return template.render(variables)
        except Exception as exc:  # noqa: BLE001
            raise TemplateError(f"template {name}: {_describe(exc)}") from None

    def find_template(self, name: str) -> Path | None:
        for root in self.search_path:
            candidate = root / name
            if candidate.is_file():
                return candidate
        return None

    # -- caches ---------------------------------------------------------------------------

    def _compile_expression(self, source: str) -> Any:
        fn = self._expr_cache.get(source)
        if fn is None:
            if "{{" in source or "{%" in source:
                raise TemplateError(f"{source!r}: conditions are already expressions; "
                                    "write them without {{ }}")
            try:
                fn = self.env.compile_expression(source, undefined_to_none=False)
            except Exception as exc:  # noqa: BLE001
                raise TemplateError(f"{source!r}: {_describe(exc)}") from None
            self._expr_cache[source] = fn
        return fn

    def _compile_string(self, source: str) -> Any:
        template = self._str_cache.get(source)
        if template is None:
            try:
                template = self.env.from_string(source)
            except Exception as exc:  # noqa: BLE001
                raise TemplateError(f"{_short(source)}: {_describe(exc)}") from None
            self._str_cache[source] = template
        return template


def _unwrap(value: Any) -> Any:
    from jinja2 import Undefined

    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    return value


def _describe(exc: BaseException) -> str:
    from jinja2 import TemplateSyntaxError, UndefinedError
    from jinja2.exceptions import SecurityError

    if isinstance(exc, UndefinedError):
        return f"undefined variable: {exc.message}"
    if isinstance(exc, SecurityError):
        return f"blocked by the template sandbox: {exc}"
    if isinstance(exc, TemplateSyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno and exc.lineno > 1 else ""
        return f"template syntax error: {exc.message}{where}"
    if isinstance(exc, TemplateError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _short(text: str, limit: int = 80) -> str:
    text = text.strip().replace("\n", " ")
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def _node_source(source: str, node: Any) -> str:
    line = source.splitlines()[node.lineno - 1] if node.lineno else ""
    return line.strip()


def split_command(source: str) -> list[str]:
    """Split a `command:` string into argv words BEFORE rendering it.

    Each `{{ expression }}` stays inside the word it was written in, so a value with
    spaces or quotes becomes part of exactly one argument.
    """
    if "{%" in source or "{#" in source:
        raise TemplateError("command: {% %} blocks are not allowed in a command string; "
                            "give the command as a list")
    holders: list[str] = []

    def hold(match: re.Match[str]) -> str:
        holders.append(match.group(0))
        return f"\x00{len(holders) - 1}\x00"

    masked = re.sub(r"\{\{.*?\}\}", hold, source, flags=re.S)
    try:
        words = shlex.split(masked)
    except ValueError as exc:
        raise TemplateError(f"command: {exc}") from None
    return [re.sub(r"\x00(\d+)\x00", lambda m: holders[int(m.group(1))], w) for w in words]
