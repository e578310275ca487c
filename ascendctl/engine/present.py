"""Make the release's engine present on every node, before any engine is stopped.

    identity = plan_engine(inv, pool)        # what the release runs (part of its id)
    ensure_engine(inv, pool, identity)       # push, load / build; refuses naming nodes

- container with an archive: the archive is relayed into every node's store (resumable,
  verified by sha256 on arrival), then loaded where the image ID is not there yet; the
  loaded image must be the ID read from the archive.
- container without an archive: every node must already hold the same image.
- venv: the wheels are relayed into the stores, and a venv per content hash is built
  offline where it is missing.
- host: nothing to do (the executable is the site's).

Every failure raises EngineError naming the node, and happens before the deploy touches
a running engine, so the previous release keeps serving.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendctl.engine.identity import (  # noqa: F401  (venv_dir, venv_command re-exported)
    EngineError, EngineIdentity, archive_identity, host_identity, identity_from_nodes,
    read_wheelhouse, venv_command, venv_dir, venv_identity,
)
from ascendctl.engine.nodeops import EngineNodeOps



@dataclass
class EnginePlan:
    identity: EngineIdentity
    objects: list[Any] = field(default_factory=list)   # weights PlannedFile per file to push
    node_images: dict[str, str | None] = field(default_factory=dict)


def node_ops(inv, pool, name: str) -> EngineNodeOps:
    host = inv.host(name)
    return EngineNodeOps(pool.conn(name), node=name, root=inv.deploy.root,
                         python=inv.deploy.python, spec=inv.engine,
                         become=host.ssh.uses_sudo)


def _map(pool, hosts, fn) -> dict[str, Any]:
    results = pool.map(fn, [h.name for h in hosts])
    failed = [r.error if str(r.error).startswith(f"{n}: ") else f"{n}: {r.error}"
              for n, r in results.items() if r.status != "ok"]
    if failed:
        raise EngineError("; ".join(failed))
    return {name: r.value for name, r in results.items()}


def plan_engine(inv, pool=None, *, cache=None, hosts=None) -> EnginePlan:
    """The engine's identity and what has to travel. Reads the archive or wheelhouse on
    this machine; asks the nodes only for a container engine without an archive."""
    from ascendctl.weights.files_push import hashed_files

    spec = inv.engine
    hosts = inv.hosts if hosts is None else hosts
    if spec.kind == "host":
        return EnginePlan(host_identity(inv.serving.engine))
    if spec.kind == "container":
        if spec.archive:
            identity, held = archive_identity(spec.archive, spec.image)
            return EnginePlan(identity, hashed_files([held.path], cache=cache))
        if pool is None:
            raise ValueError("a container engine without an archive needs a pool")
        ids = _map(pool, hosts, lambda conn: node_ops(inv, pool, conn.settings.name)
                   .image_id(spec.image))
        return EnginePlan(identity_from_nodes(spec.image, ids), node_images=ids)
    wheelhouse = read_wheelhouse(spec.wheelhouse, cache=cache)
    identity = venv_identity(wheelhouse, spec.python or inv.deploy.python, spec.packages)
    return EnginePlan(identity, hashed_files([wheelhouse.path / f.path for f in
                                              wheelhouse.files], cache=cache))


@dataclass(frozen=True)
class NodeEngine:
    node: str
    changed: bool          # loaded an image / built a venv (or would, in check mode)
    detail: str


def _label(identity: EngineIdentity) -> str:
    return identity.short if identity.kind != "container" else \
        f"{identity.detail.get('image') or 'image'} ({identity.short})"


def engine_status(inv, pool, plan: EnginePlan, *, hosts=None) -> dict[str, NodeEngine]:
    """What `ensure_engine` would do on each node (one read per node; changes nothing)."""
    spec = inv.engine
    hosts = inv.hosts if hosts is None else hosts
    identity = plan.identity
    if spec.kind == "host":
        return {h.name: NodeEngine(h.name, False, "host executable") for h in hosts}
    if spec.kind == "container" and not spec.archive:
        identity_from_nodes(spec.image, plan.node_images or {h.name: None for h in hosts})
        return {h.name: NodeEngine(h.name, False, f"{_label(identity)} present")
                for h in hosts}
    objects = sum(f.entry.size for f in plan.objects)
    if spec.kind == "container":
        present = _map(pool, hosts, lambda conn: node_ops(inv, pool, conn.settings.name)
                       .image_id(identity.id))
        return {h.name: NodeEngine(h.name, False, f"{_label(identity)} present")
                if present[h.name] == identity.id else
                NodeEngine(h.name, True, f"would relay the archive ({objects} bytes) and "
                                         f"load {_label(identity)}") for h in hosts}
    digest = identity.id.removeprefix("venv:")
    states = _map(pool, hosts, lambda conn: node_ops(inv, pool, conn.settings.name)
                  .venv_state(digest))
    return {h.name: NodeEngine(h.name, False, f"venv {identity.short} present")
            if states[h.name].present else
            NodeEngine(h.name, True, f"would relay {len(plan.objects)} wheels (at most "
                                     f"{objects} bytes) and build venv {identity.short}")
            for h in hosts}


def ensure_engine(inv, pool, plan: EnginePlan, *, show_progress: bool = True,
                  hosts=None) -> dict[str, NodeEngine]:
    """Push what must travel, then load or build it on every node that lacks it. A node
    that already has it costs one read and nothing travels."""
    from ascendctl.weights.files_push import files_plan
    from ascendctl.weights.push import push

    spec = inv.engine
    hosts = inv.hosts if hosts is None else hosts
    identity = plan.identity
    if spec.kind == "host" or (spec.kind == "container" and not spec.archive):
        return engine_status(inv, pool, plan, hosts=hosts)
    status = engine_status(inv, pool, plan, hosts=hosts)
    need = [h for h in hosts if status[h.name].changed]
    if not need:
        return status
    summary = push(inv, files_plan(inv, plan.objects, need), show_progress=show_progress,
                   pool=pool)
    if not summary.ok:
        what = "image archive" if spec.kind == "container" else "wheelhouse"
        raise EngineError(f"the {what} did not reach every node: " + "; ".join(summary.errors))
    if spec.kind == "container":
        archive = plan.objects[0].entry

        def load(conn) -> NodeEngine:
            name = conn.settings.name
            result = node_ops(inv, pool, name).load_archive(
                sha256=archive.sha256, expected_id=identity.id, image=spec.image)
            if not result.ok:
                raise EngineError(f"{name}: {result.reason}")
            return NodeEngine(name, result.loaded,
                              f"relayed and loaded {_label(identity)} in "
                              f"{result.seconds or 0:.0f} s" if result.loaded
                              else f"{_label(identity)} present")
        done = _map(pool, need, load)
    else:
        wheels = [(f.path, f.entry.sha256) for f in plan.objects]
        python = spec.python or inv.deploy.python
        digest = identity.id.removeprefix("venv:")

        def build(conn) -> NodeEngine:
            name = conn.settings.name
            result = node_ops(inv, pool, name).venv_create(
                digest=digest, python=python, wheels=wheels, packages=spec.packages)
            if not result.present:
                raise EngineError(f"{name}: venv build failed: {result.error}\n"
                                  f"{result.log or ''}".rstrip())
            return NodeEngine(name, result.created,
                              f"built venv {identity.short} in {result.seconds or 0:.0f} s")
        done = _map(pool, need, build)
    return {h.name: done.get(h.name, status[h.name]) for h in hosts}


def kept_engines(identities: Mapping[str, EngineIdentity]) -> tuple[list[str], list[str]]:
    """(image IDs, venv digests) the kept releases use (release id -> its identity)."""
    images = sorted({i.id for i in identities.values() if i.kind == "container"})
    venvs = sorted({i.id.removeprefix("venv:") for i in identities.values() if i.kind == "venv"})
    return images, venvs
