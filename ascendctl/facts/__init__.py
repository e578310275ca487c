"""Facts: what each node is, gathered in one round trip and parsed by pure functions.

pyinfra-style: each fact is a shell command (in the gather script, `gather.py`) plus a
pure parser from text to frozen dataclasses (the other modules). Nothing here touches
the network or imports fabric/rich.
"""

from ascendctl.facts.gather import (
    GatherOutputError,
    GatherParams,
    GatherParamsError,
    Section,
    build_gather_script,
    facts_from_outputs,
    parse_gather_output,
    plan_pings,
    split_sections,
)
from ascendctl.facts.node import NodeFacts, PathMtuProbe, Ping, RocePort

__all__ = [
    "GatherOutputError", "GatherParams", "GatherParamsError", "NodeFacts", "PathMtuProbe", "Ping",
    "RocePort", "Section", "build_gather_script", "facts_from_outputs", "parse_gather_output", "plan_pings", "split_sections",
]
