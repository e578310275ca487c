"""Every pydantic model of the inventory is strict: YAML's strings, numbers and booleans
are never coerced into one another (`read_only: 'no'` was a read-write mount,
`stop_timeout: true` rendered `--time=1`). Walks every model class, so a section added
later without strictness fails here."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

import ascendctl.inventory
from ascendctl.inventory.loader import CLUSTER_SECTIONS
from ascendctl.inventory.model import HostSpec, SshSpec

# wrong-typed values a lax model would coerce, by the field's scalar type
COERCIBLE: dict[type, tuple[Any, ...]] = {
    bool: ("true", "no", 1, 0),
    int: ("10", 10.0, True),
    float: ("1.5", "10", True),
    str: (1, 3.1, True),
}


def _inventory_models() -> set[type[BaseModel]]:
    """Every model defined in ascendctl.inventory, and every model a section reaches."""
    for module in pkgutil.iter_modules(ascendctl.inventory.__path__):
        importlib.import_module(f"ascendctl.inventory.{module.name}")
    found: set[type[BaseModel]] = set()
    stack: list[type] = [BaseModel]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("ascendctl.inventory."):
                found.add(sub)
    todo: list[Any] = [*CLUSTER_SECTIONS.values(), HostSpec, SshSpec]
    while todo:
        model = todo.pop()
        if model in found and model not in CLUSTER_SECTIONS.values():
            continue
        found.add(model)
        for info in model.model_fields.values():
            todo += [t for t in _types(info.annotation) if isinstance(t, type)
                     and issubclass(t, BaseModel) and t not in found]
    return found


def _types(annotation: Any) -> list[Any]:
    """The annotation and every type inside it (Optional, list[...], Annotated, ...)."""
    out = [annotation]
    for arg in get_args(annotation):
        out += _types(arg)
    return out


def _scalar(annotation: Any) -> type | None:
    """The scalar type of a field (through Optional and Annotated), or None."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _scalar(get_args(annotation)[0])
    if origin is Union:
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _scalar(inner[0]) if len(inner) == 1 else None
    if origin is Literal:
        return None
    return annotation if annotation in COERCIBLE else None


MODELS = sorted(_inventory_models(), key=lambda m: (m.__module__, m.__name__))
FIELDS = [(model, name, _scalar(info.annotation), bad)
          for model in MODELS for name, info in model.model_fields.items()
          if _scalar(info.annotation) is not None
          for bad in COERCIBLE[_scalar(info.annotation)]]  # type: ignore[index]


def test_the_walk_finds_every_section():
    names = {m.__name__ for m in MODELS}
    assert names >= {"ClusterSpec", "RoceSpec", "SshSpec", "ModelSpec", "ServingSpec",
                     "ProxySpec", "HealthSpec", "SecretRef", "VersionsSpec", "DeploySpec",
                     "RollingSpec", "SloSpec", "QualitySpec", "HostSpec", "EngineSpec",
                     "MountSpec"}
    assert len(FIELDS) > 150


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_is_configured_strict(model):
    config = model.model_config
    assert config.get("strict") is True, f"{model.__name__} coerces types"
    assert config.get("extra") == "forbid", f"{model.__name__} accepts unknown keys"


@pytest.mark.parametrize("model,name,kind,bad", FIELDS,
                         ids=lambda v: v.__name__ if isinstance(v, type) else repr(v))
def test_no_field_coerces_a_wrong_type(model, name, kind, bad):
    with pytest.raises(ValidationError) as caught:
        model.model_validate({name: bad})
    assert any(error["loc"][:1] == (name,) for error in caught.value.errors()), \
        f"{model.__name__}.{name} ({kind.__name__}) accepted {bad!r}"


def test_the_right_types_are_accepted_where_the_wrong_ones_were_refused():
    """Control: the refusals above come from the type, not from the field."""
    from ascendctl.inventory.engine import EngineSpec, MountSpec

    assert MountSpec.model_validate({"source": "/a", "target": "/b", "read_only": False}
                                    ).read_only is False
    assert EngineSpec.model_validate({"stop_timeout": 30}).stop_timeout == 30
    assert SshSpec.model_validate({"connect_timeout": 5}).connect_timeout == 5.0
