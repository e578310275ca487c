"""`kind: host` (the default): an executable already on every node, `serving.engine`.
What it runs is the site's: ascendctl identifies it by name, moves nothing, and the
rendered unit runs it directly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ascendctl.engine.identity import EngineIdentity
from ascendctl.engine.kinds.base import EngineKind, EnginePlan, NodeEngine, Path
from ascendctl.inventory.engine import EngineSpec


def host_identity(command: str) -> EngineIdentity:
    return EngineIdentity("host", f"host:{command}", "host", {"command": command})


class HostKind(EngineKind):
    name = "host"

    def section_problems(self, spec: EngineSpec) -> list[tuple[Path, str]]:
        if "command" in spec.model_fields_set:
            return [(("command",), "with kind: host the executable is serving.engine")]
        return []

    def identity(self, inv, *, node_image_ids=None, cache=None) -> EngineIdentity:
        return host_identity(inv.serving.engine)

    def recorded(self, record: Mapping[str, Any]) -> EngineIdentity | None:
        return None

    def release_component(self, identity: EngineIdentity) -> str | None:
        return None      # serving.engine is in the rendered argv already

    def plan(self, inv, pool=None, *, cache=None, hosts: Sequence[Any]) -> EnginePlan:
        return EnginePlan(self.identity(inv))

    def unmanaged(self, inv) -> str | None:
        return f"engine.kind host: {inv.serving.engine} is the site's executable"

    def status(self, inv, pool, plan: EnginePlan, *, hosts: Sequence[Any]
               ) -> dict[str, NodeEngine]:
        return {h.name: NodeEngine(h.name, False, "host executable") for h in hosts}
