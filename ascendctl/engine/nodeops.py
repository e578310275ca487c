"""The engine's operations on one node, over its persistent SSH connection: one remote
execution of runtime/ascendctl_runtime/engine_node.py each (shipped on stdin, no value
through a shell), answered with typed results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ascendctl.engine.formats import (
    ContainerInfo, DeviceHolder, LoadOutput, RuntimeVersion, parse_container_inspect,
    parse_device_holders, parse_image_id, parse_load_output, parse_runtime_version,
)
from ascendctl.inventory.engine import EngineSpec
from ascendctl.transport.nodecall import NodeCallError, call_node


class EngineOpError(NodeCallError):
    """An engine operation failed on a node."""


class _RuntimeArgs(TypedDict):
    runtime: str
    path: str


@dataclass(frozen=True)
class RuntimeState:
    version: RuntimeVersion
    path_exists: bool
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.path_exists and self.version.usable


@dataclass(frozen=True)
class LoadResult:
    ok: bool
    image_id: str | None
    loaded: bool                      # False: the image was already there
    reason: str | None = None
    seconds: float | None = None
    output: LoadOutput | None = None
    from_config: bool = False         # loaded from its config: the node held every layer


@dataclass(frozen=True)
class NpuHolders:
    processes: tuple[DeviceHolder, ...]
    containers: tuple[ContainerInfo, ...]
    container_error: str | None = None

    def others(self, own_unit: str, own_container: str) -> tuple[list[DeviceHolder],
                                                                  list[ContainerInfo]]:
        """What holds NPUs besides our own engine unit and container."""
        return ([p for p in self.processes if p.unit != own_unit],
                [c for c in self.containers if c.holds_npus and c.name != own_container])


@dataclass(frozen=True)
class VenvResult:
    present: bool
    created: bool
    path: str
    python: str | None = None
    pip_check_ok: bool | None = None
    seconds: float | None = None
    error: str | None = None
    log: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class PruneResult:
    images: tuple[str, ...]
    venvs: tuple[str, ...]
    failed: tuple[dict[str, str], ...]
    check: bool


class EngineNodeOps:
    def __init__(self, conn: Any, *, node: str, root: str, python: str, spec: EngineSpec,
                 become: bool | None = None, timeout: float = 300.0):
        self.conn, self.node, self.root, self.python = conn, node, root, python
        self.spec, self.become, self.timeout = spec, become, timeout

    def call(self, op: str, *, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        return call_node(self.conn, node=self.node, python=self.python, entry="engine_node",
                         request={"op": op, "kwargs": kwargs},
                         timeout=timeout or self.timeout, become=self.become,
                         error=EngineOpError)

    @property
    def _runtime(self) -> _RuntimeArgs:
        if self.spec.runtime is None:
            raise ValueError("this engine has no container runtime")
        return _RuntimeArgs(runtime=self.spec.runtime, path=self.spec.runtime_executable)

    def runtime(self) -> RuntimeState:
        answer = self.call("runtime_version", **self._runtime)
        version = parse_runtime_version(self.spec.runtime or "", answer.get("stdout", ""))
        error = None if answer.get("rc") == 0 else (answer.get("stderr") or "").strip()[-300:]
        return RuntimeState(version, bool(answer.get("path_exists")), error or None)

    def image_id(self, image: str) -> str | None:
        answer = self.call("image_id", image=image, **self._runtime)
        return parse_image_id(int(answer.get("rc", 1)), answer.get("stdout", ""))

    def image_state(self, image: str, diff_ids: Sequence[str]) -> tuple[str | None, set[str]]:
        """IMAGE's ID on this node (None: absent) and which of DIFF_IDS the runtime's
        storage already holds: one remote call."""
        answer = self.call("image_state", image=image, diff_ids=list(diff_ids),
                           **self._runtime)
        return (parse_image_id(int(answer.get("rc", 1)), answer.get("stdout", "")),
                {str(d) for d in answer.get("held", [])} & set(diff_ids))

    def load_archive(self, *, sha256: str, expected_id: str, image: str,
                     layout: dict[str, Any] | None = None) -> LoadResult:
        answer = self.call("load_archive", root=self.root, sha256=sha256,
                           expected_id=expected_id, image=image, timeout=3600,
                           layout=layout, **self._runtime)
        load = next((s["load"] for s in answer.get("steps", []) if "load" in s), None)
        output = parse_load_output(load["stdout"] + load["stderr"]) if load else None
        reason = answer.get("reason")
        if load and load.get("rc") and reason:
            reason += ": " + (load.get("stderr") or "").strip()[-300:]
        return LoadResult(bool(answer.get("ok")), answer.get("image_id"),
                          bool(answer.get("loaded")), reason,
                          load.get("seconds") if load else None, output,
                          bool(answer.get("from_config")))

    def npu_holders(self) -> NpuHolders:
        kwargs = self._runtime if self.spec.runtime else {"runtime": None, "path": None}
        answer = self.call("npu_holders", **kwargs)
        containers: list[ContainerInfo] = []
        error = None
        listed = answer.get("containers")
        if listed:
            inspect = listed.get("inspect")
            if inspect and inspect.get("rc") == 0:
                containers = parse_container_inspect(inspect.get("stdout", ""))
            else:
                failed = inspect or listed.get("ps") or {}
                error = (failed.get("stderr") or "").strip()[-300:] or "ps failed"
        return NpuHolders(tuple(parse_device_holders(answer)), tuple(containers), error)

    def venv_state(self, digest: str) -> VenvResult:
        return _venv(self.call("venv_state", root=self.root, digest=digest))

    def venv_create(self, *, digest: str, python: str, wheels: Sequence[tuple[str, str]],
                    packages: Sequence[str] = ()) -> VenvResult:
        return _venv(self.call("venv_create", root=self.root, digest=digest, python=python,
                               wheels=[{"name": n, "sha256": s} for n, s in wheels],
                               packages=list(packages), timeout=3600))

    def prune(self, *, keep_images: Sequence[str], keep_venvs: Sequence[str],
              check: bool = False) -> PruneResult:
        kwargs = self._runtime if self.spec.runtime else {"runtime": None, "path": None}
        answer = self.call("prune", root=self.root, keep_images=list(keep_images),
                           keep_venvs=list(keep_venvs), check=check, **kwargs)
        return PruneResult(tuple(answer.get("images", ())), tuple(answer.get("venvs", ())),
                           tuple(answer.get("failed", ())), bool(answer.get("check")))


def _venv(answer: dict[str, Any]) -> VenvResult:
    known = {"present", "created", "path", "python", "pip_check_ok", "seconds", "failure", "log"}
    return VenvResult(present=bool(answer.get("present")), created=bool(answer.get("created")),
                      path=str(answer.get("path", "")), python=answer.get("python"),
                      pip_check_ok=answer.get("pip_check_ok"), seconds=answer.get("seconds"),
                      error=answer.get("failure"), log=answer.get("log"),
                      extra={k: v for k, v in answer.items() if k not in known})
