"""The module interface and the registry other packages plug into.

A module is a class with a pydantic `Args` model and a `run(ctx, args)` method:

    from pydantic import BaseModel
    from ascendctl.playbook.modules import Module, ModuleResult, register_module

    @register_module("npu_reset")
    class NpuReset(Module):
        '''Reset one NPU (one remote execution).'''

        class Args(BaseModel, extra="forbid"):
            npu: int

        def run(self, ctx, args):
            res = ctx.run(["npu-smi", "set", "-t", "reset", "-i", str(args.npu)])
            return ModuleResult.from_command(res, changed=True)

Put such modules in `ascendctl/<package>/playbook_modules.py` (or a
`playbook_modules/` package): the engine imports every one it finds before loading a
playbook. `runs_on = "controller"` modules never open a connection; with `run_once: true`
they see every host's variables (`ctx.hostvars`) - the place for cross-node checks and
deploy gates. State shared with the run's other tasks lives in `ctx.run_state`
(ascendctl/playbook/state.py), never in globals.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, TypeVar

from ascendctl.errors import AscendctlError
from ascendctl.playbook.state import RunState

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ascendctl.inventory import Host, Inventory
    from ascendctl.playbook.templating import Templar
    from ascendctl.transport import CommandResult, HostPool, Remote


class ModuleError(AscendctlError):
    """A module could not do its job on a host; the task fails there with this message."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass
class FileDiff:
    path: str
    before: Optional[str]   # None: did not exist (or not shown)
    after: Optional[str]    # None: removed (or not shown)
    note: Optional[str] = None

    def unified(self) -> str:
        if self.note and (self.before is None and self.after is None):
            return f"--- {self.path}\n{self.note}\n"
        before = (self.before or "").splitlines(keepends=True)
        after = (self.after or "").splitlines(keepends=True)
        lines = list(difflib.unified_diff(
            before, after, fromfile=f"{self.path} (before)" if self.before is not None
            else "/dev/null", tofile=f"{self.path} (after)", n=3))
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        if self.note:
            text += f"# {self.note}\n"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "diff": self.unified()}


@dataclass
class ModuleResult:
    changed: bool = False
    failed: bool = False
    skipped: bool = False
    msg: str = ""
    data: dict[str, Any] = field(default_factory=dict)   # registered fields (rc, stdout, ...)
    diffs: list[FileDiff] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # variables set on the host (set_fact)
    # A run_once controller module may judge each host separately (e.g. a ping matrix).
    per_host: Optional[dict[str, "ModuleResult"]] = None

    @classmethod
    def from_command(cls, result: "CommandResult", *, changed: bool = True,
                     msg: str | None = None) -> "ModuleResult":
        data = command_data(result)
        failed = not result.ok
        if msg is None:
            if result.timed_out:
                msg = "timed out"
            elif failed:
                tail = (result.stderr.strip() or result.stdout.strip()).splitlines()
                msg = f"exit {result.exit_status}" + (f": {tail[-1][:300]}" if tail else "")
            else:
                msg = ""
        return cls(changed=changed and not failed, failed=failed, msg=msg, data=data)


def command_data(result: "CommandResult") -> dict[str, Any]:
    stdout, stderr = result.stdout, result.stderr
    return {
        "rc": result.exit_status if result.exit_status is not None else -1,
        "stdout": stdout.rstrip("\n"), "stderr": stderr.rstrip("\n"),
        "stdout_lines": stdout.splitlines(), "stderr_lines": stderr.splitlines(),
        "cmd": result.command, "delta": round(result.duration, 3),
        "timed_out": result.timed_out,
    }


@dataclass
class ModuleContext:
    """What a module sees when it runs for one host (or once, for run_once)."""

    host: "Host"
    vars: Mapping[str, Any]
    inventory: "Inventory"
    templar: "Templar"
    check: bool
    diff: bool
    playbook_dir: Path
    hostvars: Mapping[str, Mapping[str, Any]]
    play_hosts: Sequence[str]
    become: Optional[bool] = None
    timeout: Optional[float] = None
    # What the run's tasks share (typed parts such as the deploy's DeployRun).
    run_state: RunState = field(default_factory=RunState)
    # Set when the run is interrupted (Ctrl-C): wait on it instead of sleeping.
    cancel: threading.Event = field(default_factory=threading.Event)
    _conn_factory: Optional[Callable[[str], "Remote"]] = None
    _pool: Optional["HostPool[Any]"] = None

    @property
    def pool(self) -> "HostPool[Any]":
        """The run's connection pool (run_once modules that work on many hosts at once)."""
        if self._pool is None:
            raise ModuleError("the connection pool is only given to run_once tasks")
        return self._pool

    @property
    def conn(self) -> "Remote":
        """The host's persistent connection (opened on first use)."""
        if self._conn_factory is None:
            raise ModuleError("this module runs on the controller and has no connection")
        return self._conn_factory(self.host.name)

    def connection_for(self, name: str) -> "Remote":
        """Another play host's connection (for run_once controller modules)."""
        if self._conn_factory is None:
            raise ModuleError("no connections available")
        return self._conn_factory(name)

    def run(self, argv: Sequence[Any], **kwargs: Any) -> "CommandResult":
        kwargs.setdefault("become", self.become)
        kwargs.setdefault("timeout", self.timeout)
        return self.conn.run(argv, **kwargs)

    def run_shell(self, script: str, args: Sequence[Any] = (), **kwargs: Any) -> "CommandResult":
        kwargs.setdefault("become", self.become)
        kwargs.setdefault("timeout", self.timeout)
        return self.conn.run_shell(script, args, **kwargs)

    def run_script(self, script: str, args: Sequence[Any] = (), **kwargs: Any
                   ) -> "CommandResult":
        kwargs.setdefault("become", self.become)
        kwargs.setdefault("timeout", self.timeout)
        return self.conn.run_script(script, args, **kwargs)


ArgsT = TypeVar("ArgsT")


Order = tuple[tuple[str, ...], tuple[str, ...]]     # (needs, provides)


class Module:
    """Base class of playbook modules (see the module docstring for an example)."""

    name: ClassVar[str] = ""
    Args: ClassVar[type["BaseModel"]]
    # The argument a scalar value maps to: `shell: "echo hi"` → {cmd: "echo hi"}.
    free_form: ClassVar[Optional[str]] = None
    # Where run() executes: on a host's connection, or on the controller only.
    runs_on: ClassVar[Literal["host", "controller"]] = "host"
    # False: skipped under --check unless the task says `check_mode: false`.
    supports_check: ClassVar[bool] = True
    # Arguments whose values must not be templated at load-time validation (raw text).
    raw_args: ClassVar[frozenset[str]] = frozenset()
    # The run's order: what earlier tasks must have produced (in ctx.run_state) before this
    # module runs, and what it produces; a playbook that breaks it is refused when it is
    # loaded (ascendctl/playbook/order.py). Names are the producing package's vocabulary.
    needs: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    # Where they depend on an argument's value: (argument, {value: (needs, provides)}).
    order_by: ClassVar[Optional[tuple[str, Mapping[str, "Order"]]]] = None

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def order(cls, args: Mapping[str, Any]) -> "Order":
        """(needs, provides) of a task with ARGS (as loaded: templates not rendered)."""
        if cls.order_by is not None:
            argument, cases = cls.order_by
            value = args.get(argument)
            if isinstance(value, str) and value in cases:
                return cases[value]
        return cls.needs, cls.provides

    @classmethod
    def normalize(cls, value: Any) -> Any:
        """Turn the YAML value after the module key into an argument mapping."""
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return dict(value)
        if cls.free_form is not None:
            return {cls.free_form: value}
        raise ModuleError(f"{cls.name} takes a mapping of arguments")


MODULES: dict[str, type[Module]] = {}


def register_module(name: str | None = None):
    """Class decorator: make a Module available to playbooks under `name`."""
    def decorate(cls: type[Module]) -> type[Module]:
        module_name = name or cls.name
        if not module_name:
            raise ValueError(f"{cls.__name__}: give the module a name")
        if not hasattr(cls, "Args"):
            raise ValueError(f"{cls.__name__}: a module needs an Args model")
        existing = MODULES.get(module_name)
        if existing is not None and existing is not cls and \
                existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"playbook module {module_name!r} is already registered by "
                             f"{existing.__module__}.{existing.__qualname__}")
        cls.name = module_name
        MODULES[module_name] = cls
        return cls

    return decorate


def get_module(name: str) -> Optional[type[Module]]:
    return MODULES.get(name)
