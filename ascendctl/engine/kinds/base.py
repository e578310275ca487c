"""`EngineKind`: everything that differs between the kinds of serving engine (`engine.kind`
in the inventory: host, container, venv). One module per kind implements it; the router
(ascendctl/engine/kinds/__init__.py) picks the kind, and the rest of ascendctl asks it
instead of comparing kind names:

- validate: the `engine:` fields only this kind uses (`fields`), its rules over the
  section (`section_problems`) and the other sections (`check_inventory`,
  `check_against_pins`);
- identity: what makes two releases run the same engine (`identity`, `preview_identity`,
  `recorded`), what the release id and meta keep of it (`release_component`, `summary`);
- present/prune: what a deploy makes present on the nodes (`plan`, `status`, `install`),
  what a rollback finds there (`is_present`), what prune keeps (`node_objects`);
- launch: engine.json's argv and the engine unit (`launch`, `ray_argv`);
- preflight: the facts to gather (`gather_params`) and what the engine checks expect
  (`expectation`: the checks read its fields, never the kind's name).

The defaults describe an engine ascendctl neither moves nor wraps (the host kind's);
a kind overrides what it does differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ascendctl.engine.identity import EngineError, EngineIdentity
from ascendctl.engine.nodeops import EngineNodeOps
from ascendctl.inventory.engine import EngineSpec

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory

Path = tuple[Any, ...]
Fail = Callable[[str, Path], Exception]
# where the engine section's fields are in the inventory file
BASE: Path = ("all", "vars")
ENGINE_UNIT_TEMPLATE = "systemd/ascendctl-engine.service.j2"


@dataclass
class EnginePlan:
    """The release's engine and what has to travel to the nodes for it."""

    identity: EngineIdentity
    objects: list[Any] = field(default_factory=list)   # weights PlannedFile per file to push
    node_images: dict[str, str | None] = field(default_factory=dict)
    # what a node can make the engine from without the objects (container: the image's
    # config and layer digests, for a node whose storage holds every layer)
    without_objects: dict[str, Any] | None = None


@dataclass(frozen=True)
class NodeEngine:
    node: str
    changed: bool          # loaded an image / built a venv (or would, in check mode)
    detail: str
    relay: bool = True     # when changed: the plan's objects must reach this node first


@dataclass(frozen=True)
class NodeObjects:
    """What an engine leaves on a node that prune may remove once no release uses it."""

    images: tuple[str, ...] = ()       # image IDs ascendctl loaded
    venvs: tuple[str, ...] = ()        # venv digests ascendctl built

    def __bool__(self) -> bool:
        return bool(self.images or self.venvs)


@dataclass(frozen=True)
class Launch:
    """What the renderer writes for the engine: engine.json's argv and the engine unit's
    template with the fields only this kind's template uses."""

    argv: list[str]
    unit_template: str = ENGINE_UNIT_TEMPLATE
    unit_fields: Mapping[str, Any] = field(default_factory=dict)


class EngineKind(ABC):
    name: ClassVar[str]
    # the engine-section fields only this kind uses (others are refused for it)
    fields: ClassVar[tuple[str, ...]] = ()
    # what the relay carries to the nodes for it, for messages ("image archive")
    relayed: ClassVar[str] = ""

    # -- validate ------------------------------------------------------------------------

    def section_problems(self, spec: EngineSpec) -> list[tuple[Path, str]]:
        """(field path within the engine section, message) for every rule of this kind
        over the section alone, in field order."""
        return []

    def check_inventory(self, sections: Mapping[str, Any], fail: Fail,
                        written: Container[Path]) -> None:
        """Raise fail(message, yaml path) for the first rule over the other sections the
        inventory breaks, once the engine section is coherent. `written`: the YAML paths
        present in the file (to tell a default from a value someone wrote)."""
        return None

    def check_against_pins(self, sections: Mapping[str, Any], pins: Mapping[str, str],
                           fail: Fail) -> None:
        """After the `versions:` pins are known to be one release set."""
        return None

    # -- identity ------------------------------------------------------------------------

    @abstractmethod
    def identity(self, inv: Inventory, *, node_image_ids: Mapping[str, str | None] | None = None,
                 cache: Any = None) -> EngineIdentity:
        """The identity of INV's engine (`node_image_ids`: what the nodes report, for a
        kind whose identity is read there)."""

    def preview_identity(self, inv: Inventory) -> EngineIdentity:
        """The identity when no node was asked (`ascendctl render`, tests)."""
        return self.identity(inv)

    def identity_needs_nodes(self, spec: EngineSpec) -> bool:
        return False

    @abstractmethod
    def recorded(self, record: Mapping[str, Any]) -> EngineIdentity | None:
        """The identity a release meta recorded (`summary`), or None when the release
        does not depend on it."""

    def release_component(self, identity: EngineIdentity) -> str | None:
        """The line hashed into the release id (None: the rendered files say it all)."""
        return identity.release_component()

    def summary(self, inv: Inventory, identity: EngineIdentity) -> dict[str, Any]:
        """What the release meta records of its engine (history, rollback, prune)."""
        return {"kind": identity.kind, "id": identity.id, "short": identity.short}

    def label(self, identity: EngineIdentity) -> str:
        """The engine in the deploy's per-node messages."""
        return identity.short

    def describe(self, identity: EngineIdentity) -> str:
        """The engine a release runs, in a rollback's refusal."""
        return identity.short

    # -- present / prune -----------------------------------------------------------------

    @abstractmethod
    def plan(self, inv: Inventory, pool: Any = None, *, cache: Any = None,
             hosts: Sequence[Host]) -> EnginePlan:
        """The identity and what has to travel (read on this machine where it can be)."""

    def unmanaged(self, inv: Inventory) -> str | None:
        """Why a deploy makes nothing present for this kind (None: it does)."""
        return None

    @abstractmethod
    def status(self, inv: Inventory, pool: Any, plan: EnginePlan, *,
               hosts: Sequence[Host]) -> dict[str, NodeEngine]:
        """What making it present would do on each node (changes nothing)."""

    def install(self, inv: Inventory, pool: Any, plan: EnginePlan, *,
                need: Sequence[Host]) -> dict[str, NodeEngine]:
        """Load or build it on NEED, once `plan.objects` reached their stores."""
        raise NotImplementedError(f"engine.kind {self.name} installs nothing")

    def is_present(self, ops: EngineNodeOps, identity: EngineIdentity) -> bool:
        """Whether a node still holds what a recorded release runs (rollback)."""
        return True

    def recorded_spec(self, record: Mapping[str, Any], current: EngineSpec) -> EngineSpec:
        """The spec the node operations need for a release's recorded engine (the
        inventory may name another engine by now)."""
        return EngineSpec()

    def node_objects(self, identity: EngineIdentity) -> NodeObjects:
        return NodeObjects()

    # -- launch --------------------------------------------------------------------------

    def launch(self, inv: Inventory, *, release: str, argv: list[str],
               env_names: Sequence[str], identity: EngineIdentity,
               secrets_file: str | None) -> Launch:
        """`argv`: render.engine's engine argv, the executable first."""
        return Launch(argv, unit_fields={"ray": inv.serving.mode == "ray"})

    def ray_argv(self, inv: Inventory, identity: EngineIdentity, argv: list[str]) -> list[str]:
        return argv

    # -- preflight -----------------------------------------------------------------------

    def gather_params(self, inv: Inventory) -> dict[str, Any]:
        """GatherParams fields for the engine facts."""
        return {}

    def expectation(self, inv: Inventory) -> dict[str, Any]:
        """The EngineExpectation fields this kind sets (besides kind and allow_own)."""
        return {}


def map_nodes(pool: Any, hosts: Sequence[Host], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """FN on every host's connection; the values, or EngineError naming every failure."""
    results = pool.map(fn, [h.name for h in hosts])
    failed = [r.error if str(r.error).startswith(f"{n}: ") else f"{n}: {r.error}"
              for n, r in results.items() if r.status != "ok"]
    if failed:
        raise EngineError("; ".join(failed))
    return {name: r.value for name, r in results.items()}


def node_ops(inv: Inventory, pool: Any, name: str) -> EngineNodeOps:
    # the transport only when a node is asked: loading the kinds (every command) stays light

    host = inv.host(name)
    return EngineNodeOps(pool.conn(name), node=name, root=inv.deploy.root,
                         python=inv.deploy.python, spec=inv.engine,
                         become=host.ssh.uses_sudo)


def refuse_serving_engine(sections: Mapping[str, Any], fail: Fail, written: Container[Path],
                          kind: str, where: str) -> None:
    """serving.engine is the host kind's executable; for KIND it is engine.command WHERE."""
    if BASE + ("serving", "engine") in written:
        raise fail(f"serving.engine is the executable on the host (engine.kind host); with "
                   f"engine.kind {kind} the engine is engine.command (default vllm) {where}",
                   BASE + ("serving", "engine"))
