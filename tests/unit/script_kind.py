"""A toy fourth engine kind, `kind: script`: an executable script on the jump host
(`engine.command`, an absolute path), relayed into every node's store and run from
there by /bin/sh with render.engine's arguments.

It lives in this one file and reaches ascendctl only through the router's registry
(tests/unit/test_engine_kinds.py registers it): that no other file needs a change is
what the test proves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Mapping, Sequence
from pathlib import Path as FilePath
from typing import Any

from ascendctl.engine.identity import EngineIdentity
from ascendctl.engine.kinds.base import (
    EngineKind, EnginePlan, Fail, Launch, NodeEngine, Path, refuse_serving_engine,
)
from ascendctl.inventory.engine import EngineSpec
from ascendctl_runtime.weights_node import Store


def script_identity(sha256: str, script: str | None = None) -> EngineIdentity:
    return EngineIdentity("script", f"script:{sha256}", f"script-{sha256[:12]}",
                          {"script": script} if script else {})


class ScriptKind(EngineKind):
    name = "script"
    relayed = "engine script"

    def section_problems(self, spec: EngineSpec) -> list[tuple[Path, str]]:
        if not spec.command.startswith("/"):
            return [(("command",), "with kind: script the command is the script's absolute "
                                   "path on the jump host")]
        return []

    def check_inventory(self, sections: Mapping[str, Any], fail: Fail,
                        written: Container[Path]) -> None:
        refuse_serving_engine(sections, fail, written, self.name, "shipped to every node")

    def identity(self, inv, *, node_image_ids=None, cache=None) -> EngineIdentity:
        script = inv.engine.command
        return script_identity(hashlib.sha256(FilePath(script).read_bytes()).hexdigest(),
                               script)

    def recorded(self, record: Mapping[str, Any]) -> EngineIdentity | None:
        return script_identity(str(record["id"]).removeprefix("script:")) \
            if record.get("id") else None

    def plan(self, inv, pool=None, *, cache=None, hosts: Sequence[Any]) -> EnginePlan:
        from ascendctl.weights.files_push import hashed_files

        return EnginePlan(self.identity(inv), hashed_files([FilePath(inv.engine.command)],
                                                           cache=cache))

    def status(self, inv, pool, plan: EnginePlan, *, hosts: Sequence[Any]
               ) -> dict[str, NodeEngine]:
        # the relay skips what a store already holds: relaying is the check
        return {h.name: NodeEngine(h.name, True, f"would relay {plan.identity.short}")
                for h in hosts}

    def install(self, inv, pool, plan: EnginePlan, *, need: Sequence[Any]
                ) -> dict[str, NodeEngine]:
        return {h.name: NodeEngine(h.name, True, f"{plan.identity.short} in the store")
                for h in need}

    def launch(self, inv, *, release: str, argv: list[str], env_names: Sequence[str],
               identity: EngineIdentity, secrets_file: str | None) -> Launch:
        script = Store(inv.deploy.root).object_path(identity.id.removeprefix("script:"))
        return super().launch(inv, release=release, argv=["/bin/sh", script, *argv[1:]],
                              env_names=env_names, identity=identity,
                              secrets_file=secrets_file)
