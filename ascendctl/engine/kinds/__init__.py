"""The engine kinds and the router to them: `kind_of(spec)` is the `EngineKind` (base.py)
of an inventory's `engine:` section, `kind_named(name)` the one a release recorded.

    REGISTRY = {kind.name: kind for kind in (HostKind(), ContainerKind(), VenvKind())}

A new kind is one module implementing EngineKind plus its entry here (or `register`);
nothing else names kinds. Importing this package also hands the registry to the
inventory loader (inventory.engine.use_engine_kinds): `kind:` accepts the registered
names and every inventory is checked by `check_engine_inventory` below.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from ascendctl.engine.identity import EngineIdentity
from ascendctl.engine.kinds.base import BASE, EngineKind, Fail, Path
from ascendctl.engine.kinds.container import ContainerKind
from ascendctl.engine.kinds.host import HostKind
from ascendctl.engine.kinds.venv import VenvKind
from ascendctl.releases.sets import check_versions
from ascendctl.errors import AscendctlError
from ascendctl.inventory.engine import EngineSpec, use_engine_kinds

REGISTRY: dict[str, EngineKind] = {kind.name: kind for kind in
                                   (HostKind(), ContainerKind(), VenvKind())}


def register(kind: EngineKind) -> EngineKind:
    REGISTRY[kind.name] = kind
    return kind


def kind_named(name: str) -> EngineKind:
    try:
        return REGISTRY[name]
    except KeyError:
        raise AscendctlError(f"engine kind {name!r} is not known to this ascendctl (known: "
                             f"{', '.join(REGISTRY)})") from None


def kind_of(spec: EngineSpec) -> EngineKind:
    return kind_named(spec.kind)


def identity_from_record(record: Mapping[str, Any]) -> EngineIdentity | None:
    """The engine a release meta recorded (`summary.engine`), or None: no record, a kind
    this ascendctl does not know, or one the release does not depend on (host)."""
    kind = REGISTRY.get(str(record.get("kind") or ""))
    return kind.recorded(record) if kind else None


def recorded_spec(record: Mapping[str, Any], current: EngineSpec) -> EngineSpec:
    """The spec the node operations need for a recorded engine (see EngineKind)."""
    kind = REGISTRY.get(str(record.get("kind") or ""))
    return kind.recorded_spec(record, current) if kind else EngineSpec()


def section_problems(spec: EngineSpec) -> list[tuple[Path, str]]:
    """(field path within the engine section, message) for every field another kind uses
    and every rule of the spec's own kind over the section, in that order."""
    kind = kind_of(spec)
    problems: list[tuple[Path, str]] = []
    for other in REGISTRY.values():
        for name in other.fields:
            if other is not kind and name not in kind.fields and name in spec.model_fields_set:
                problems.append(((name,), f"applies to kind: {other.name}, not {kind.name}"))
    return problems + kind.section_problems(spec)


def check_engine_inventory(sections: Mapping[str, Any], fail: Fail,
                           written: Container[Path]) -> None:
    """What the inventory loader checks about the engine once every section is valid: the
    `engine:` fields fit its kind, the kind's rules over the other sections, `versions:`
    is one release set, then the kind's rules against those pins. Raises fail(message,
    yaml path) for the first problem."""
    spec = sections["engine"]
    for field, message in section_problems(spec):
        raise fail(message, BASE + ("engine", *field))
    kind = kind_of(spec)
    kind.check_inventory(sections, fail, written)
    pins = {k: v for k, v in sections["versions"].model_dump().items() if v}
    check_versions(pins, lambda message, component: fail(
        message, BASE + ("versions", component)))
    kind.check_against_pins(sections, pins, fail)


use_engine_kinds(REGISTRY, check_engine_inventory)
