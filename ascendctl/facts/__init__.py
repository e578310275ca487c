"""Facts: what each node is, gathered in one round trip and parsed by pure functions.

pyinfra-style: a fact is one object (fact.py) holding the shell command that reads it and
a pure parser from text to frozen dataclasses, defined next to its parser (npu_smi.py,
hccn.py, system.py, ...). The registry finds every fact of this package; the gather
script (gather.py) runs their commands in one round trip and `NodeFacts` (node.py) holds
their values. Nothing here touches the network or imports fabric/rich; the node runtime
ships this package, so it stays standard-library only.
"""

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

__all__ = [
    "Derived", "Fact", "GatherOutputError", "GatherParams", "GatherParamsError", "KeyedFact", "NodeFacts",
    "PathMtuProbe", "Ping", "Reading", "RocePort", "Section", "all_facts", "build_gather_script",
    "fact_named", "facts_from_outputs", "parse_gather_output", "plan_pings", "split_sections",
]
