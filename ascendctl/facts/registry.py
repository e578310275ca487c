"""Every fact of this package: found by importing its modules, so a new fact module needs
no wiring anywhere else. The order (module name, then definition order) is the order the
gather script starts the commands in and `ascendctl facts --json` lists the facts in."""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache

import ascendctl.facts as package
from ascendctl.facts.fact import FactBase, KeyedFact, _Parsed

SECTION_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
RESERVED_NAMES = ("host", "problems", "missing")     # NodeFacts' own fields


@lru_cache(maxsize=1)
def all_facts() -> tuple[FactBase, ...]:
    found: list[FactBase] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, FactBase) and v.module == module.__name__]
    check_registry(found)
    return tuple(found)


def fact_named(name: str) -> FactBase:
    for fact in all_facts():
        if fact.name == name:
            return fact
    raise KeyError(f"no fact named {name!r}")


def check_registry(facts: list[FactBase]) -> None:
    """Names unique, section names printable and not claimed by two facts."""
    names: dict[str, FactBase] = {}
    for fact in facts:
        if fact.name in names or fact.name in RESERVED_NAMES or not fact.name.isidentifier():
            raise ValueError(f"fact name {fact.name!r} ({fact.module}) is taken or not an identifier")
        names[fact.name] = fact
    parsed = [f for f in facts if isinstance(f, _Parsed)]
    for fact in parsed:
        if not SECTION_NAME.fullmatch(fact.section):
            raise ValueError(f"fact {fact.name}: section name {fact.section!r}")
        for other in parsed:
            if other is fact:
                continue
            if other.section == fact.section or (
                    isinstance(fact, KeyedFact) and other.section.startswith(fact.section + ":")):
                raise ValueError(f"facts {fact.name} and {other.name} both claim section {other.section!r}")
