"""The inventory's `engine:` section: its plain fields, each validated on its own.

What a kind means — which fields it uses, its rules over this and the other sections —
is the kind's (ascendctl/engine/kinds/: host, the default, container, venv). That
package builds on this one: its router hands the loader the registered kinds when it is
imported (`use_engine_kinds`), so `kind:` accepts exactly the registered names and the
loader runs the kinds' rules without importing them.

Field validators reject what could reach a command line wrongly (leading `-`, control
characters, relative or unnormalised paths).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Container, Mapping
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from ascendctl.errors import AscendctlError
from ascendctl.inventory.container_safety import acknowledgement_problem
from ascendctl.inventory.excerpt import excerpt
from ascendctl.inventory.model import Section
from ascendctl.inventory.secretscan import secret_kind

COMMAND_RE = re.compile(r"[A-Za-z0-9_.+/][A-Za-z0-9_.+/-]{0,254}")
# docker/podman image reference: [host[:port]/]path[:tag][@sha256:hex], or an image ID
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    r"(?:(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?)/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
    r"|sha256:[0-9a-f]{64}")
# docker's reference grammar (distribution/reference): the repository name, registry
# included, is at most 255 characters; a tag at most 128 (IMAGE_RE), a digest 71
IMAGE_NAME_MAX = 255
IMAGE_REFERENCE_MAX = IMAGE_NAME_MAX + 1 + 128 + 1 + 71
SIZE_RE = re.compile(r"[1-9][0-9]{0,12}[kKmMgG]?")
PACKAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?:==[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63})?")
# Extra `run` options, each one token `--name=value` (or a bare flag): only options that
# neither change what ascendctl manages (name, network, IPC, devices, restart, detach,
# environment) nor could carry a secret into the argv.
RUN_OPTIONS = {
    "--cap-add": True, "--cap-drop": True, "--security-opt": True, "--ulimit": True,
    "--user": True, "--group-add": True, "--pids-limit": True, "--label": True,
    "--workdir": True, "--tmpfs": True, "--init": False, "--privileged": False,
    "--read-only": False, "--memory": True, "--oom-score-adj": True,
}
# (sections, fail(message, yaml path) -> exception, yaml paths written) -> None
InventoryCheck = Callable[[Mapping[str, Any], Callable[[str, tuple[Any, ...]], Exception],
                           Container[tuple[Any, ...]]], None]
_kinds: Mapping[str, object] = {}
_kinds_check: InventoryCheck | None = None


def use_engine_kinds(kinds: Mapping[str, object], check: InventoryCheck) -> None:
    """Called once by ascendctl.engine.kinds: `kinds` is its registry (name -> kind, in
    order; later registrations show through), `check` the engine rules the loader runs
    once every section is valid."""
    global _kinds, _kinds_check
    _kinds, _kinds_check = kinds, check


def _loaded_check() -> InventoryCheck:
    if _kinds_check is None:
        raise AscendctlError("internal: no engine kinds are registered: load inventories "
                             "with ascendctl.load.load_inventory")
    return _kinds_check


def engine_kind_names() -> tuple[str, ...]:
    _loaded_check()
    return tuple(_kinds)


def check_engine_inventory(sections: Mapping[str, Any],
                           fail: Callable[[str, tuple[Any, ...]], Exception],
                           written: Container[tuple[Any, ...]]) -> None:
    """The registered kinds' rules (raises fail(message, yaml path) for the first)."""
    _loaded_check()(sections, fail, written)


def _one_of(names: tuple[str, ...]) -> str:
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _no_control(value: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("must not contain newlines or control characters")
    return value


def _absolute(value: str, *, home: bool = False) -> str:
    """An absolute, normalised POSIX path (`~/...` allowed for jump-host paths)."""
    _no_control(value)
    if not value:
        raise ValueError("must not be empty")
    body = value
    if home and (value == "~" or value.startswith("~/")):
        body = value[1:] or "/"
    if not body.startswith("/"):
        raise ValueError(f"{excerpt(value)} must be an absolute path"
                         + (" (or ~/...)" if home else ""))
    normal = posixpath.normpath(body)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    if normal != body:
        raise ValueError(f"{excerpt(value)} is not normalised (use "
                         f"{excerpt(value[:len(value) - len(body)] + normal)})")
    return value


class MountSpec(Section):
    """An extra bind mount into the engine container."""

    source: str
    target: str
    read_only: bool = True

    @field_validator("source", "target")
    @classmethod
    def _paths(cls, value: str) -> str:
        path = _absolute(value)
        if path == "/":
            raise ValueError("must not be the root directory")
        if "," in path or ":" in path:
            raise ValueError("must not contain ',' or ':' (they separate mount options)")
        return path


class EngineSpec(Section):
    kind: str = "host"                       # a registered engine kind (engine_kind_names)
    # the engine's executable inside the image (container) or in the venv's bin (venv);
    # for kind host it is serving.engine
    command: str = "vllm"
    runtime: Optional[Literal["docker", "podman"]] = None
    runtime_path: Optional[str] = None       # default /usr/bin/<runtime>
    image: Optional[str] = None
    archive: Optional[str] = None            # docker/podman `save` tarball on the jump host
    mounts: list[MountSpec] = []
    options: list[str] = []
    ipc: Literal["host", "private"] = "host"
    shm_size: Optional[str] = None           # only with ipc: private (podman refuses it with host IPC)
    # `stop --time`: SIGTERM, then SIGKILL. A serving vLLM exits on SIGTERM in about a
    # second; one in torch.compile warm-up does not answer it at all (seen in the lab), and
    # every stop of a rollback waits this long per node: the runtimes' own default.
    stop_timeout: int = Field(default=10, ge=1, le=3600)
    # the unsafe options and mounts the engine needs, each by name (docs/engine.md,
    # ascendctl/inventory/container_safety.py); preflight and status warn about them
    allow_unsafe: list[str] = []
    wheelhouse: Optional[str] = None         # directory of wheels on the jump host
    packages: list[str] = []                 # what to install from it (default: every wheel)
    python: Optional[str] = None             # the nodes' Python for the venv (default deploy.python)

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        names = engine_kind_names()
        if not isinstance(value, str) or value not in names:
            raise ValueError(f"{excerpt(value)} is not one of {_one_of(names)}")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        _no_control(value)
        if not COMMAND_RE.fullmatch(value) or value.startswith("-"):
            raise ValueError("use an executable name or absolute path (letters, digits, "
                             "'_', '.', '+', '-', '/'; no leading '-')")
        if "/" in value:
            _absolute(value)
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return None
        _no_control(value)
        if len(value) > IMAGE_REFERENCE_MAX or not IMAGE_RE.fullmatch(value):
            raise ValueError("not an image reference ([registry/]name[:tag][@sha256:...] "
                             "or sha256:<id>)")
        if len(image_name(value)) > IMAGE_NAME_MAX:
            raise ValueError(f"the image's repository name is {len(image_name(value))} "
                             f"characters; docker and podman allow at most {IMAGE_NAME_MAX}")
        return value

    @field_validator("allow_unsafe")
    @classmethod
    def _acknowledged(cls, value: list[str]) -> list[str]:
        for item in value:
            problem = acknowledgement_problem(item)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("archive", "wheelhouse")
    @classmethod
    def _jump_host_path(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _absolute(value, home=True)

    @field_validator("python", "runtime_path")
    @classmethod
    def _node_path(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _absolute(value)

    @field_validator("shm_size")
    @classmethod
    def _size(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not SIZE_RE.fullmatch(value):
            raise ValueError("use a size such as 1g, 512m or 16g")
        return value

    @field_validator("packages")
    @classmethod
    def _packages(cls, value: list[str]) -> list[str]:
        for item in value:
            _no_control(item)
            if not PACKAGE_RE.fullmatch(item):
                raise ValueError(f"{excerpt(item)}: use a distribution name, optionally "
                                 "==version")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for item in value:
            _no_control(item)
            name, eq, arg = item.partition("=")
            if name not in RUN_OPTIONS:
                raise ValueError(f"{excerpt(item)}: not an allowed run option (allowed: "
                                 f"{', '.join(sorted(RUN_OPTIONS))}; ascendctl sets the "
                                 "name, network, IPC, devices, mounts and environment)")
            if RUN_OPTIONS[name] and (not eq or not arg):
                raise ValueError(f"{excerpt(item)}: write {excerpt(name)}=VALUE as one item")
            if not RUN_OPTIONS[name] and eq:
                raise ValueError(f"{excerpt(item)}: {name} takes no value")
            kind = secret_kind(arg)
            if kind:
                raise ValueError(f"{name}: holds {kind}, a secret; secrets never go into "
                                 "the argv (use serving.api_key)")
        return value

    @property
    def runtime_executable(self) -> str:
        return self.runtime_path or f"/usr/bin/{self.runtime or 'podman'}"

    @property
    def effective_shm_size(self) -> Optional[str]:
        return (self.shm_size or "1g") if self.ipc == "private" else None


def image_name(reference: str) -> str:
    """The repository name of an image reference: without the tag and the digest."""
    if reference.startswith("sha256:"):
        return ""
    name = reference.partition("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name
