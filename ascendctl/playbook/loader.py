"""Read a playbook YAML file into plays and tasks, or fail naming file, line and field.

Everything that can be checked without a host is checked here: unknown keys (with the
closest valid one suggested), exactly one module per task, module arguments against the
module's schema, expression and template syntax, handler names, register names, and
that a shell script quotes every value it interpolates, and that every task comes after
the tasks that provide what it needs (ascendctl/playbook/order.py).

`- import_plays: FILE` (with optional `vars:`) in a playbook or a rolling block's `plays:`
stands for the plays of FILE, loaded with the same checks (errors name FILE): FILE is
looked up next to the importing file first, then in the project's playbooks/.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.yamlsrc import SourceMap, YamlPath, dotted, load_yaml_with_lines
from ascendctl.paths import playbooks_dir, templates_dir
from ascendctl.playbook.model import Play, Playbook, PlaybookItem, Rolling, Task, Where
from ascendctl.playbook.modules import MODULES, Module, ModuleError, get_module, load_modules
from ascendctl.playbook.order import check_order
from ascendctl.playbook.templating import Templar, TemplateError, contains_template

PLAY_KEYS = ("name", "hosts", "order", "serial", "vars", "tasks", "handlers", "tags",
             "gather_facts", "any_errors_fatal", "always", "rescue", "confirm", "become")
TASK_KEYS = ("name", "when", "tags", "register", "retries", "delay", "until", "notify",
             "ignore_errors", "run_once", "changed_when", "failed_when", "check_mode",
             "no_log", "become", "timeout", "vars")
HANDLER_KEYS = TASK_KEYS + ("listen",)
ROLLING_KEYS = ("name", "rolling", "hosts", "plays", "tags")
ROLLING_OPTIONS = ("max_unavailable",)
IMPORT_KEYS = ("import_plays", "vars")
MAX_IMPORT_DEPTH = 4
ORDERS = ("parallel", "rank", "serial")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_VARS = frozenset({"hostvars", "groups", "inventory_hostname", "play_hosts", "rolling",
                           "result", "vars", "item"})


def templar_for(playbook_path: Path) -> Templar:
    """Templates are looked up next to the playbook first, then in the project's templates/."""
    base = playbook_path.resolve().parent
    roots = [base / "templates", base, base.parent / "templates", templates_dir()]
    seen: list[Path] = []
    for root in roots:
        if root not in seen and root.is_dir():
            seen.append(root)
    return Templar(seen)


def resolve_playbook_path(name: str | os.PathLike[str]) -> Path:
    """A path as given, or a name from the project's playbooks/ directory."""
    path = Path(name)
    if path.exists():
        return path
    for candidate in (playbooks_dir() / path, playbooks_dir() / f"{path}.yaml",
                      playbooks_dir() / f"{path}.yml"):
        if candidate.is_file():
            return candidate
    raise InputError("playbook not found (give a path, or a name from "
                     f"{playbooks_dir()})", file=str(path))


def load_playbook(path: str | os.PathLike[str], templar: Templar | None = None) -> Playbook:
    path = resolve_playbook_path(path)
    data, source = _read(path)
    load_modules(plugins=False)
    loader = _Loader(path, source, templar or templar_for(path),
                     playbook_dir=path.resolve().parent, chain=(path.resolve(),))
    playbook = loader.build(data)
    check_order(playbook)
    return playbook


def _read(path: Path) -> tuple[Any, SourceMap]:
    try:
        return load_yaml_with_lines(path)
    except InputError as err:
        if err.field and err.field.startswith("["):
            # Plays are the top-level list: name them plays[N] like every other error.
            raise InputError(err.reason, file=err.file, line=err.line,
                             field="plays" + err.field) from None
        raise


class _Loader:
    """One file's plays. `chain`: the files from the playbook to this one (imports);
    `playbook_dir`: the playbook's directory, where the run looks for local files."""

    def __init__(self, path: Path, source: SourceMap, templar: Templar, *,
                 playbook_dir: Path, chain: tuple[Path, ...]):
        self.path = path
        self.source = source
        self.templar = templar
        self.playbook_dir = playbook_dir
        self.chain = chain

    # -- errors ----------------------------------------------------------------------------

    def fail(self, message: str, path: YamlPath) -> InputError:
        return InputError(message, file=str(self.path), line=self.source.line_of(path),
                          field=dotted(_display_path(path)) or None)

    def where(self, path: YamlPath) -> Where:
        return Where(str(self.path), self.source.line_of(path), dotted(_display_path(path)))

    def unknown(self, key: Any, valid: list[str], path: YamlPath, what: str) -> InputError:
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return self.fail(f"unknown {what} {key!r}{hint}", path)

    # -- structure -------------------------------------------------------------------------

    def build(self, data: Any) -> Playbook:
        return Playbook(path=self.path, plays=self.items(data, in_rolling=None))

    def items(self, data: Any, *, in_rolling: Where | None) -> list[PlaybookItem]:
        """The file's plays, imports in place. `in_rolling`: the rolling block this file's
        plays are imported into, if any."""
        a, what = ("an", "imported file") if len(self.chain) > 1 else ("a", "playbook")
        if data is None:
            raise InputError(f"the {what} is empty", file=str(self.path))
        if not isinstance(data, list):
            raise self.fail(f"{a} {what} is a list of plays (start each with `- name:`)", ())
        plays = [item for index, raw in enumerate(data)
                 for item in self.item(raw, (index,), in_rolling)]
        if not plays:
            raise InputError(f"the {what} has no plays", file=str(self.path))
        return plays

    def item(self, raw: Any, path: YamlPath, in_rolling: Where | None) -> list[PlaybookItem]:
        if isinstance(raw, dict) and "import_plays" in raw:
            return self.imported(raw, path, in_rolling)
        if isinstance(raw, dict) and "rolling" in raw:
            if in_rolling is not None:
                inside = "" if in_rolling.file == str(self.path) else \
                    f" (this file is imported into the rolling block at {in_rolling})"
                raise self.fail(f"rolling blocks do not nest{inside}", path + ("rolling",))
            return [self.rolling(raw, path)]
        return [self.play(raw, path)]

    def imported(self, raw: dict[str, Any], path: YamlPath,
                 in_rolling: Where | None) -> list[PlaybookItem]:
        """`import_plays: FILE` with optional `vars:` (defaults of each imported play's
        vars; a play's own vars win)."""
        for key in raw:
            if key not in IMPORT_KEYS:
                raise self.unknown(key, list(IMPORT_KEYS), path + (key,), "key of an import")
        where = path + ("import_plays",)
        name = self.text(raw["import_plays"], where)
        if contains_template(name):
            raise self.fail("import_plays names a file as written (imports are read before "
                            "any variable exists)", where)
        target = self.import_target(name, where)
        if target in self.chain:
            cycle = " -> ".join(p.name for p in self.chain[self.chain.index(target):])
            raise self.fail(f"import cycle: {cycle} -> {target.name}", where)
        if len(self.chain) > MAX_IMPORT_DEPTH:
            raise self.fail(f"imports nest at most {MAX_IMPORT_DEPTH} deep", where)
        defaults = self.mapping(raw.get("vars") or {}, path + ("vars",))
        for key in defaults:
            self.var_name(key, path + ("vars", key))
        self.check_templates(defaults, path + ("vars",))
        data, source = _read(target)
        loader = _Loader(target, source, self.templar, playbook_dir=self.playbook_dir,
                         chain=self.chain + (target,))
        items = loader.items(data, in_rolling=in_rolling)
        for item in items:
            for play in item.plays if isinstance(item, Rolling) else [item]:
                play.vars = {**defaults, **play.vars}
        return items

    def import_target(self, name: str, where: YamlPath) -> Path:
        given = Path(name)
        if given.is_absolute():
            candidates, looked = [given], ""
        else:
            candidates = [self.path.resolve().parent / given, playbooks_dir() / given]
            looked = f" (looked next to {self.path.name} and in {playbooks_dir()})"
        for candidate in candidates:
            if candidate.is_file():
                return candidate.resolve()
        raise self.fail(f"import_plays: {name!r} not found{looked}", where)

    def play(self, raw: Any, path: YamlPath) -> Play:
        if not isinstance(raw, dict):
            raise self.fail("a play must be a mapping (name, hosts, tasks, ...)", path)
        for key in raw:
            if key not in PLAY_KEYS:
                raise self.unknown(key, list(PLAY_KEYS) + ["import_plays"], path + (key,),
                                   "play key")
        if "hosts" not in raw:
            raise self.fail("a play needs `hosts` (a group, a host or a pattern such as "
                            "'nodes:!node3')", path)
        hosts = self.text(raw["hosts"], path + ("hosts",))
        name = self.text(raw.get("name", hosts), path + ("name",))
        order = raw.get("order", "parallel")
        if order not in ORDERS:
            raise self.fail(f"order must be one of {', '.join(ORDERS)} (got {order!r})",
                            path + ("order",))
        serial = raw.get("serial")
        if serial is not None:
            if isinstance(serial, bool) or not (
                    (isinstance(serial, int) and serial >= 1)
                    or (isinstance(serial, str) and re.fullmatch(r"\d{1,3}%", serial)
                        and 0 < int(serial[:-1]) <= 100)):
                raise self.fail("serial must be a number of hosts (>= 1) or a percentage "
                                "such as '50%'", path + ("serial",))
            if order == "parallel":
                order = "serial"
            elif order == "rank":
                raise self.fail("order: rank already runs one host at a time; drop `serial`",
                                path + ("serial",))
        play_vars = self.mapping(raw.get("vars") or {}, path + ("vars",))
        for key in play_vars:
            self.var_name(key, path + ("vars", key))
        self.check_templates(play_vars, path + ("vars",))
        handlers = [self.task(item, path + ("handlers", i), handler=True, index=i)
                    for i, item in enumerate(self.sequence(raw.get("handlers") or [],
                                                            path + ("handlers",)))]
        handler_names: dict[str, Task] = {}
        for handler in handlers:
            for alias in (handler.name, *handler.listen):
                if alias in handler_names and handler_names[alias] is not handler:
                    raise self.fail(f"two handlers answer to {alias!r}",
                                    _path_of(handler.where, path))
                handler_names[alias] = handler
        tasks = [self.task(item, path + ("tasks", i), handler=False, index=i)
                 for i, item in enumerate(self.sequence(raw.get("tasks") or [],
                                                         path + ("tasks",)))]
        for group, prefix in ((tasks, "tasks"), (handlers, "handlers")):
            for task in group:
                for target in task.notify:
                    if target not in handler_names:
                        known = list(handler_names)
                        close = difflib.get_close_matches(target, known, n=1, cutoff=0.6)
                        hint = f"; did you mean {close[0]!r}?" if close else (
                            f" (handlers: {', '.join(known)})" if known else
                            " (this play has no handlers)")
                        raise self.fail(f"notify: no handler named {target!r}{hint}",
                                        path + (prefix, task.index, "notify"))
        gather = self.flag(raw.get("gather_facts", False), path + ("gather_facts",))
        if gather:
            load_modules()
            if get_module("gather_facts") is None:
                raise self.fail("gather_facts: no facts module is installed (the "
                                "`gather_facts` module comes from ascendctl.facts)",
                                path + ("gather_facts",))
        confirm = raw.get("confirm")
        if confirm is not None:
            confirm = self.text(confirm, path + ("confirm",))
        always = self.flag(raw.get("always", False), path + ("always",))
        rescue = self.flag(raw.get("rescue", False), path + ("rescue",))
        if always and rescue:
            raise self.fail("a play is `always` (runs whatever happened) or `rescue` (runs "
                            "only after a failure), not both", path + ("rescue",))
        if rescue and confirm is not None:
            raise self.fail("a rescue play runs after a failure and cannot wait for an "
                            "answer; drop `confirm`", path + ("confirm",))
        return Play(
            name=name, hosts=hosts, where=self.where(path), order=order, serial=serial,
            vars=play_vars, tasks=tasks, handlers=handlers,
            tags=self.tags(raw.get("tags"), path + ("tags",)), gather_facts=gather,
            any_errors_fatal=self.flag(raw.get("any_errors_fatal", False),
                                       path + ("any_errors_fatal",)),
            always=always, rescue=rescue, confirm=confirm,
            become=self.optional_flag(raw.get("become"), path + ("become",)))

    def rolling(self, raw: dict[str, Any], path: YamlPath) -> Rolling:
        """`rolling:` with `plays:` — the plays repeated once per batch of serving groups."""
        for key in raw:
            if key not in ROLLING_KEYS:
                raise self.unknown(key, list(ROLLING_KEYS), path + (key,), "key of a rolling "
                                   "block")
        options = raw["rolling"]
        if options is True or options is None:
            options = {}
        if not isinstance(options, dict):
            raise self.fail("rolling takes a mapping (max_unavailable: N) or true",
                            path + ("rolling",))
        for key in options:
            if key not in ROLLING_OPTIONS:
                raise self.unknown(key, list(ROLLING_OPTIONS), path + ("rolling", key),
                                   "rolling option")
        max_unavailable = options.get("max_unavailable", 1)
        where = path + ("rolling", "max_unavailable")
        if isinstance(max_unavailable, str):
            if not contains_template(max_unavailable):
                raise self.fail("max_unavailable must be a number of serving groups (>= 1) "
                                "or a template giving one", where)
            self.check_templates(max_unavailable, where)
        else:
            max_unavailable = self.integer(max_unavailable, where, low=1, high=100000)
        hosts = self.text(raw.get("hosts", "all"), path + ("hosts",))
        name = self.text(raw.get("name", "rolling"), path + ("name",))
        if "plays" not in raw:
            raise self.fail("a rolling block needs `plays:` (the plays run for each batch of "
                            "serving groups)", path)
        inner = self.sequence(raw["plays"], path + ("plays",))
        block = self.where(path)
        plays = [play for i, item in enumerate(inner)
                 for play in self.item(item, path + ("plays", i), in_rolling=block)
                 if isinstance(play, Play)]    # item() refuses a rolling block here
        if not any(not (p.rescue or p.always) for p in plays):
            raise self.fail("a rolling block needs at least one play that is neither rescue "
                            "nor always", path + ("plays",))
        return Rolling(name=name, where=block, plays=plays, hosts=hosts,
                       max_unavailable=max_unavailable,
                       tags=self.tags(raw.get("tags"), path + ("tags",)))

    def task(self, raw: Any, path: YamlPath, *, handler: bool, index: int) -> Task:
        keywords = HANDLER_KEYS if handler else TASK_KEYS
        if not isinstance(raw, dict):
            raise self.fail("a task must be a mapping (name, one module, options)", path)
        module_keys = [k for k in raw if k not in keywords]
        modules = load_modules(plugins=any(k not in MODULES for k in module_keys))
        for key in module_keys:
            if key not in modules:
                what = "task key or module"
                raise self.unknown(key, list(keywords) + sorted(modules), path + (key,), what)
        if not module_keys:
            raise self.fail(f"the task names no module (modules: {', '.join(sorted(modules))})",
                            path)
        if len(module_keys) > 1:
            raise self.fail(f"a task runs one module; found {', '.join(map(repr, module_keys))}",
                            path + (module_keys[1],))
        module_name = module_keys[0]
        module_cls = modules[module_name]
        args = self.module_args(module_cls, raw[module_name], path + (module_name,))
        name = raw.get("name")
        name = self.text(name, path + ("name",)) if name is not None else \
            f"{module_name} {_summary(args)}".strip()
        register = raw.get("register")
        if register is not None:
            register = self.var_name(register, path + ("register",))
        retries = raw.get("retries")
        if retries is not None:
            retries = self.integer(retries, path + ("retries",), low=0, high=10000)
        until = self.condition(raw.get("until"), path + ("until",))
        if until is not None and retries is None:
            retries = 3
        delay = self.number(raw.get("delay", 5), path + ("delay",), low=0)
        timeout = raw.get("timeout")
        if timeout is not None:
            timeout = self.number(timeout, path + ("timeout",), low=0.001)
        task_vars = self.mapping(raw.get("vars") or {}, path + ("vars",))
        for key in task_vars:
            self.var_name(key, path + ("vars", key))
        self.check_templates(task_vars, path + ("vars",))
        run_once = self.flag(raw.get("run_once", False), path + ("run_once",))
        if handler and run_once:
            raise self.fail("run_once is not supported on handlers", path + ("run_once",))
        return Task(
            name=name, module=module_name, args=args, where=self.where(path),
            when=self.condition(raw.get("when"), path + ("when",)),
            tags=self.tags(raw.get("tags"), path + ("tags",)), register=register,
            retries=retries, delay=delay, until=until,
            notify=tuple(self.str_list(raw.get("notify"), path + ("notify",))),
            ignore_errors=self.flag(raw.get("ignore_errors", False), path + ("ignore_errors",)),
            run_once=run_once,
            changed_when=self.condition(raw.get("changed_when"), path + ("changed_when",)),
            failed_when=self.condition(raw.get("failed_when"), path + ("failed_when",)),
            check_mode=self.optional_flag(raw.get("check_mode"), path + ("check_mode",)),
            no_log=self.flag(raw.get("no_log", False), path + ("no_log",)),
            become=self.optional_flag(raw.get("become"), path + ("become",)),
            timeout=timeout, vars=task_vars,
            listen=tuple(self.str_list(raw.get("listen"), path + ("listen",))),
            index=index)

    # -- module arguments ------------------------------------------------------------------

    def module_args(self, module_cls: type[Module], raw: Any, path: YamlPath) -> dict[str, Any]:
        try:
            args = module_cls.normalize(raw)
        except (ModuleError, TemplateError) as err:
            raise self.fail(str(err), path) from None
        self.check_templates(args, path)
        validate_args(module_cls, args, lambda msg, loc: self.fail(msg, path + loc))
        check = getattr(module_cls, "check_at_load", None)
        # files on this machine a module reads (copy's src), next to the playbook
        check_files = getattr(module_cls, "check_local_files", None)
        try:
            if check is not None:
                check(args, self.templar)
            if check_files is not None:
                check_files(args, self.playbook_dir)
        except (ModuleError, TemplateError) as err:
            field = getattr(err, "field", None)
            raise self.fail(str(err), path + (field,) if field else path) from None
        return args

    def check_templates(self, value: Any, path: YamlPath) -> None:
        if isinstance(value, str):
            try:
                self.templar.check_template(value)
            except TemplateError as err:
                raise self.fail(str(err), path) from None
        elif isinstance(value, Mapping):
            for key, item in value.items():
                self.check_templates(item, path + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.check_templates(item, path + (i,))

    # -- scalar helpers --------------------------------------------------------------------

    def text(self, value: Any, path: YamlPath) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail(f"expected text, got {type(value).__name__}", path)
        return str(value)

    def flag(self, value: Any, path: YamlPath) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"expected true or false, got {value!r}", path)
        return value

    def optional_flag(self, value: Any, path: YamlPath) -> bool | None:
        return None if value is None else self.flag(value, path)

    def integer(self, value: Any, path: YamlPath, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(f"expected a whole number between {low} and {high}, got {value!r}",
                            path)
        return value

    def number(self, value: Any, path: YamlPath, low: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            raise self.fail(f"expected a number >= {low:g}, got {value!r}", path)
        return float(value)

    def mapping(self, value: Any, path: YamlPath) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"expected a mapping, got {type(value).__name__}", path)
        return value

    def sequence(self, value: Any, path: YamlPath) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list, got {type(value).__name__}", path)
        return value

    def str_list(self, value: Any, path: YamlPath) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise self.fail("expected text or a list of text", path)

    def tags(self, value: Any, path: YamlPath) -> frozenset[str]:
        items = self.str_list(value, path)
        for item in items:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", item):
                raise self.fail(f"tag {item!r}: use letters, digits, '_', '.', '-'", path)
        return frozenset(items)

    def var_name(self, value: Any, path: YamlPath) -> str:
        if not isinstance(value, str) or not IDENT_RE.fullmatch(value):
            raise self.fail(f"{value!r} is not a valid variable name", path)
        if value in RESERVED_VARS:
            raise self.fail(f"{value!r} is reserved", path)
        return value

    def condition(self, value: Any, path: YamlPath) -> Any:
        if value is None or isinstance(value, bool):
            return value
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, bool):
                continue
            if not isinstance(item, str):
                raise self.fail(f"expected an expression, got {type(item).__name__}", path)
            try:
                self.templar.check_expression(item)
            except TemplateError as err:
                raise self.fail(str(err), path + ((i,) if isinstance(value, list) else ())) \
                    from None
        return value


def validate_args(module_cls: type[Module], args: dict[str, Any], fail: Any, *,
                  lenient: bool = True) -> Any:
    """Check arguments against the module's schema.

    At load time (lenient) templated values are skipped: they are checked after rendering.
    """
    from pydantic import ValidationError

    try:
        return module_cls.Args.model_validate(args)
    except ValidationError as err:
        # Unknown arguments first: a typo often also makes a required one "missing".
        errors = sorted(err.errors(include_url=False),
                        key=lambda e: e["type"] != "extra_forbidden")
        for error in errors:
            loc = tuple(error["loc"])
            top = loc[0] if loc else None
            if lenient and top in args and contains_template(args[top]):
                continue
            kind = error["type"]
            if kind == "extra_forbidden":
                valid = list(module_cls.Args.model_fields)
                close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else \
                    f" (arguments: {', '.join(valid)})"
                raise fail(f"{module_cls.name}: unknown argument {loc[-1]!r}{hint}", loc) from None
            if kind == "missing":
                raise fail(f"{module_cls.name}: missing required argument {loc[-1]!r}", loc) from None
            message = error["msg"].removeprefix("Value error, ")
            raise fail(f"{module_cls.name}: {message}", loc) from None
    return None


def _summary(args: Mapping[str, Any]) -> str:
    for key in ("argv", "cmd", "dest", "path", "unit", "name", "src", "that", "msg"):
        if key in args:
            value = args[key]
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            return text if len(text) <= 60 else text[:59] + "…"
    return ""


def _display_path(path: YamlPath) -> YamlPath:
    # Plays are list items at the top level: show them as plays[0] rather than [0].
    if path and isinstance(path[0], int):
        return ("plays", path[0], *path[1:])
    return path


def _path_of(where: Where, fallback: YamlPath) -> YamlPath:
    return fallback
