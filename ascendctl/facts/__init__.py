"""Facts: what each node is, gathered in one round trip and parsed by pure functions.

pyinfra-style: a fact is one object (fact.py) holding the shell command that reads it and
a pure parser from text to frozen dataclasses, defined next to its parser (npu_smi.py,
hccn.py, system.py, ...). The registry finds every fact of this package; the gather
script (gather.py) runs their commands in one round trip and `NodeFacts` (node.py) holds
their values. Nothing here touches the network or imports fabric/rich; the node runtime
ships this package, so it stays standard-library only.

The names below are exported lazily (PEP 562): importing one module of the package, as
the node runtime does (`ascendctl.facts.npu_smi`), does not import the others, so node
code ships only the parsers it uses (ascendctl/nodecode.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascendctl.facts.fact import Derived, Fact, KeyedFact, Reading, Section
    from ascendctl.facts.gather import (
        GatherOutputError,
        GatherParams,
        GatherParamsError,
        build_gather_script,
        facts_from_outputs,
        parse_gather_output,
        plan_pings,
        split_sections,
    )
    from ascendctl.facts.node import NodeFacts, PathMtuProbe, Ping, RocePort
    from ascendctl.facts.registry import all_facts, fact_named

_EXPORTED_FROM = {
    "fact": ("Derived", "Fact", "KeyedFact", "Reading", "Section"),
    "gather": ("GatherOutputError", "GatherParams", "GatherParamsError", "build_gather_script",
               "facts_from_outputs", "parse_gather_output", "plan_pings", "split_sections"),
    "node": ("NodeFacts", "PathMtuProbe", "Ping", "RocePort"),
    "registry": ("all_facts", "fact_named"),
}
_MODULE_OF = {name: module for module, names in _EXPORTED_FROM.items() for name in names}

__all__ = [
    "Derived", "Fact", "GatherOutputError", "GatherParams", "GatherParamsError", "KeyedFact", "NodeFacts",
    "PathMtuProbe", "Ping", "Reading", "RocePort", "Section", "all_facts", "build_gather_script",
    "fact_named", "facts_from_outputs", "parse_gather_output", "plan_pings", "split_sections",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
