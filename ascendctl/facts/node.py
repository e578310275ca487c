"""`NodeFacts`: everything known about one host after one gather round trip.

It holds one value per registered fact (see fact.py): `facts[NPU_SMI]` is typed by the
fact object; `facts.npu_smi` is the same value by name. Nothing here names a fact: a new
fact module is picked up by the registry and shows up here on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, TypeVar

from ascendctl.facts.fact import FactBase, Reading
from ascendctl.facts.hccn import PathMtuProbe, Ping, RocePort
from ascendctl.facts.registry import all_facts

if TYPE_CHECKING:
    from ascendctl.facts.fact import Section
    from ascendctl.facts.npu_smi_detail import HealthInfo
    from ascendctl.facts.system import Interface

__all__ = ["NodeFacts", "PathMtuProbe", "Ping", "RocePort", "build_node_facts"]

V = TypeVar("V")


class NodeFacts:
    """One host's facts: `host`, one value per registered fact, and what went wrong while
    reading them (`problems`: (section, what); `missing`: sections whose command is not
    installed on the host)."""

    __slots__ = ("host", "problems", "missing", "_values")

    host: str
    problems: tuple[tuple[str, str], ...]
    missing: tuple[str, ...]

    def __init__(self, host: str, values: Mapping[str, object], *,
                 problems: tuple[tuple[str, str], ...] = (), missing: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "host", host)
        object.__setattr__(self, "problems", tuple(problems))
        object.__setattr__(self, "missing", tuple(missing))
        object.__setattr__(self, "_values", dict(values))

    def __getitem__(self, fact: FactBase[V]) -> V:
        try:
            return self._values[fact.name]
        except KeyError:
            raise KeyError(f"{fact!r} is not a registered fact (see ascendctl.facts.registry)") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"NodeFacts has no fact {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("NodeFacts is read-only")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeFacts):
            return NotImplemented
        return (self.host, self.problems, self.missing, self._values) == (
            other.host, other.problems, other.missing, other._values)

    def __repr__(self) -> str:
        return f"NodeFacts({self.host!r}, {len(self._values)} facts, {len(self.problems)} problems)"

    def to_dict(self) -> dict:
        """JSON-ready form of the listed facts (frozensets as sorted lists, enums as values,
        computed properties left out); for `ascendctl facts --json`."""
        out: dict[str, Any] = {"host": self.host}
        for fact in all_facts():
            if fact.listed and fact.name in self._values:
                out[fact.name] = jsonable(self._values[fact.name])
        out["problems"] = jsonable(self.problems)
        out["missing"] = jsonable(self.missing)
        return out

    # --- lookups over the common facts ------------------------------------------------

    def port(self, device: int) -> RocePort | None:
        for p in self._values.get("roce") or ():
            if p.device == device:
                return p
        return None

    def interface(self, name: str) -> "Interface | None":
        for i in self._values.get("interfaces") or ():
            if i.name == name:
                return i
        return None

    def interface_with(self, address: str) -> "Interface | None":
        for i in self._values.get("interfaces") or ():
            if i.has_address(address):
                return i
        return None

    def health_of(self, npu: int, chip: int = 0) -> "HealthInfo | None":
        for n, c, h in self._values.get("health") or ():
            if n == npu and c == chip:
                return h
        return None

    def problem(self, section_prefix: str) -> str | None:
        for name, what in self.problems:
            if name == section_prefix or name.startswith(section_prefix + ":"):
                return f"{name}: {what}"
        return None


def jsonable(value):
    """Dataclasses as dicts of their fields (or their own `to_json()`, e.g. a version range
    as the version file writes it), enums as values, sets sorted, tuples as lists."""
    import dataclasses
    from enum import Enum

    if hasattr(value, "to_json") and not isinstance(value, type):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (frozenset, set)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def build_node_facts(sections: Mapping[str, "Section"], *, host: str = "", sent_at: float | None = None,
                     received_at: float | None = None) -> NodeFacts:
    """Every registered fact's value from one gather's sections. Problems are those of the
    listed facts and what they read; a fact nobody lists or reads is parsed quietly."""
    reading = Reading(sections, host=host, sent_at=sent_at, received_at=received_at)
    facts = all_facts()
    for fact in facts:
        if fact.listed:
            reading[fact]
    reading.recording = False
    for fact in facts:
        reading[fact]
    return NodeFacts(host, reading.values, problems=tuple(reading.problems), missing=tuple(reading.missing))
