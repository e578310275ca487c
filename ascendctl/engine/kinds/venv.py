"""`kind: venv`: a directory of wheels on the jump host (`wheelhouse:`), relayed into the
nodes' stores and installed offline into `<deploy.root>/engines/venv/<content hash>/`
(`pip install --no-index --no-deps` of every wheel, or of `packages:` with their
dependencies from the wheelhouse) by `python:` (default deploy.python).

The engine's Python packages are the wheelhouse's; the engine and ray executables are
the venv's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Container, Mapping, Sequence
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

from ascendctl.engine.expectation import EnginePackages
from ascendctl.engine.identity import (
    EngineError, EngineIdentity, Wheelhouse, read_wheelhouse,
)
from ascendctl.engine.kinds.base import (
    EngineKind, EnginePlan, Fail, Launch, NodeEngine, NodeObjects, Path, map_nodes, node_ops,
    refuse_serving_engine,
)
from ascendctl.inventory.engine import EngineSpec
from ascendctl.weights.files_push import hashed_files

if TYPE_CHECKING:
    from ascendctl.engine.nodeops import EngineNodeOps

FIELDS = ("wheelhouse", "packages", "python")
ENGINES_DIR = "engines"
WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-")


def venv_digest(wheelhouse: str, python: str, packages: tuple[str, ...] | list[str]) -> str:
    """What a venv on a node is built from: the same inputs give the same directory."""
    text = json.dumps({"wheelhouse": wheelhouse, "python": python,
                       "packages": sorted(packages)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def venv_identity_of(venv_id: str, detail: Mapping[str, str] | None = None) -> EngineIdentity:
    return EngineIdentity("venv", venv_id, "venv-" + venv_id.removeprefix("venv:")[:12],
                          dict(detail or {}))


def venv_identity(wheelhouse: Wheelhouse, python: str, packages) -> EngineIdentity:
    digest = venv_digest(wheelhouse.digest, python, tuple(packages))
    return venv_identity_of(f"venv:{digest}", {
        "wheelhouse": str(wheelhouse.path), "wheelhouse_sha256": wheelhouse.digest,
        "python": python})


def venv_dir(root: str, identity: EngineIdentity) -> str:
    """`<deploy.root>/engines/venv/<digest>`: where a node builds the release's venv."""
    return f"{root.rstrip('/')}/{ENGINES_DIR}/venv/{identity.id.removeprefix('venv:')}"


def venv_command(root: str, identity: EngineIdentity, command: str) -> str:
    """An executable of a venv release (replaces argv[0] of the engine or ray)."""
    return f"{venv_dir(root, identity)}/bin/{command}"


def wheel_versions(directory: str) -> dict[str, str]:
    """Distribution name (normalised: lower case, `_`) -> version, from wheel file names."""
    out: dict[str, str] = {}
    for path in sorted(FilePath(directory).glob("*.whl")):
        match = WHEEL_RE.match(path.name)
        if match:
            name = re.sub(r"[-_.]+", "_", match.group("name")).lower()
            out[name] = match.group("version")
    return out


def wheelhouse_packages(versions: Mapping[str, str], error: str | None = None) -> EnginePackages:
    """The engine packages of a wheelhouse, worded for the version checks."""
    return EnginePackages(
        versions=versions, error=f"engine.wheelhouse: {error}" if error else None,
        error_fix="Point engine.wheelhouse at a directory of wheels (pip wheel ... -w DIR)",
        missing="the wheelhouse has no wheel of: ", install="pip wheel",
        install_into=" -w <engine.wheelhouse>")


class VenvKind(EngineKind):
    name = "venv"
    fields = FIELDS
    relayed = "wheelhouse"

    # -- validate ------------------------------------------------------------------------

    def section_problems(self, spec: EngineSpec) -> list[tuple[Path, str]]:
        problems: list[tuple[Path, str]] = []
        if spec.wheelhouse is None:
            problems.append((("wheelhouse",), "kind: venv needs wheelhouse: (a directory of "
                                              "wheels on the jump host)"))
        if "/" in spec.command:
            problems.append((("command",), "with kind: venv the command is a name in the "
                                           "venv's bin directory"))
        return problems

    def check_inventory(self, sections: Mapping[str, Any], fail: Fail,
                        written: Container[Path]) -> None:
        refuse_serving_engine(sections, fail, written, self.name, "in the venv")

    # -- identity ------------------------------------------------------------------------

    def identity(self, inv, *, node_image_ids=None, cache=None) -> EngineIdentity:
        spec = inv.engine
        wheelhouse = read_wheelhouse(spec.wheelhouse or "", cache=cache)
        return venv_identity(wheelhouse, spec.python or inv.deploy.python, spec.packages)

    def recorded(self, record: Mapping[str, Any]) -> EngineIdentity | None:
        if not record.get("id"):
            return None
        python = record.get("python")
        return venv_identity_of(str(record["id"]), {"python": str(python)} if python else {})

    def summary(self, inv, identity: EngineIdentity) -> dict[str, Any]:
        return {**super().summary(inv, identity), "python": identity.detail.get("python")}

    def describe(self, identity: EngineIdentity) -> str:
        return f"venv {identity.short}"

    # -- present / prune -----------------------------------------------------------------

    def plan(self, inv, pool=None, *, cache=None, hosts: Sequence[Any]) -> EnginePlan:
        spec = inv.engine
        wheelhouse = read_wheelhouse(spec.wheelhouse or "", cache=cache)
        identity = venv_identity(wheelhouse, spec.python or inv.deploy.python, spec.packages)
        return EnginePlan(identity, hashed_files([wheelhouse.path / f.path for f in
                                                  wheelhouse.files], cache=cache))

    def status(self, inv, pool, plan: EnginePlan, *, hosts: Sequence[Any]
               ) -> dict[str, NodeEngine]:
        identity = plan.identity
        objects = sum(f.entry.size for f in plan.objects)
        digest = identity.id.removeprefix("venv:")
        states = map_nodes(pool, hosts, lambda conn: node_ops(inv, pool, conn.settings.name)
                           .venv_state(digest))
        return {h.name: NodeEngine(h.name, False, f"venv {identity.short} present")
                if states[h.name].present else
                NodeEngine(h.name, True, f"would relay {len(plan.objects)} wheels (at most "
                                         f"{objects} bytes) and build venv {identity.short}")
                for h in hosts}

    def install(self, inv, pool, plan: EnginePlan, *, need: Sequence[Any]
                ) -> dict[str, NodeEngine]:
        spec, identity = inv.engine, plan.identity
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
        return map_nodes(pool, need, build)

    def is_present(self, ops: EngineNodeOps, identity: EngineIdentity) -> bool:
        return ops.venv_state(identity.id.removeprefix("venv:")).present

    def recorded_spec(self, record: Mapping[str, Any], current: EngineSpec) -> EngineSpec:
        return EngineSpec(kind=self.name)

    def node_objects(self, identity: EngineIdentity) -> NodeObjects:
        return NodeObjects(venvs=(identity.id.removeprefix("venv:"),))

    # -- launch --------------------------------------------------------------------------

    def launch(self, inv, *, release: str, argv: list[str], env_names: Sequence[str],
               identity: EngineIdentity, secrets_file: str | None) -> Launch:
        command = venv_command(inv.deploy.root, identity, inv.engine.command)
        return super().launch(inv, release=release, argv=[command, *argv[1:]],
                              env_names=env_names, identity=identity,
                              secrets_file=secrets_file)

    def ray_argv(self, inv, identity: EngineIdentity, argv: list[str]) -> list[str]:
        return [venv_command(inv.deploy.root, identity, "ray"), *argv[1:]]

    # -- preflight -----------------------------------------------------------------------

    def gather_params(self, inv) -> dict[str, Any]:
        return {"python": inv.engine.python or inv.deploy.python}

    def expectation(self, inv) -> dict[str, Any]:
        """The wheelhouse's package versions, from the wheel file names."""
        wheelhouse = inv.engine.wheelhouse
        try:
            versions = wheel_versions(wheelhouse or "")
            error = None if versions else f"{wheelhouse} holds no wheels"
        except OSError as err:
            versions, error = {}, f"{wheelhouse}: {err.strerror}"
        return {"packages": wheelhouse_packages(versions, error)}
