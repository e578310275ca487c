"""The release an inventory produces: every node's files and a content-derived id.

The id is a hash of everything a node would run (rendered files, the runtime bundle,
the weights each node holds, the secret's digest), so deploying the same inventory
twice yields the same release — and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascendctl_runtime.layout import ENGINE_UNITS, SIDE_UNITS, UNITS_DIR

from ascendctl.deploy.bundle import runtime_bundle
from ascendctl.engine.identity import EngineIdentity
from ascendctl.engine.kinds import kind_named
from ascendctl.inventory import Inventory
from ascendctl.render.files import RenderedFile, release_dir
from ascendctl.render.release import render_release

ID_PLACEHOLDER = "r-000000000000"
# ENGINE_UNITS start rank-ordered, in that order. SIDE_UNITS: per node, no ordering; started
# once the release serves. The exporter carries the node agent, the supervisor (head only)
# the gang recovery.


@dataclass(frozen=True)
class ReleasePlan:
    release_id: str
    files: dict[str, tuple[RenderedFile, ...]]   # node → files (relative to the release)
    engine_units: dict[str, tuple[str, ...]]     # node → engine units, start order
    side_units: dict[str, tuple[str, ...]]       # node → exporter / watchdog units
    summary: dict[str, Any] = field(default_factory=dict)

    def directory(self, inv: Inventory) -> str:
        return release_dir(inv.deploy.root, self.release_id)

    def units(self, node: str) -> tuple[str, ...]:
        return self.engine_units[node] + self.side_units[node]

    def meta(self, by: str) -> dict[str, Any]:
        return {"id": self.release_id, "by": by, "summary": self.summary,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _digest(files: Mapping[str, Sequence[RenderedFile]], extra: Sequence[str]) -> str:
    hasher = hashlib.sha256()
    for node in sorted(files):
        for rendered in sorted(files[node], key=lambda f: f.path):
            hasher.update(f"{node}\0{rendered.path}\0{rendered.mode:o}\0".encode())
            hasher.update(hashlib.sha256(rendered.content).digest())
    for item in extra:
        hasher.update(item.encode() + b"\0")
    return hasher.hexdigest()


def summarize(inv: Inventory, engine: EngineIdentity | None = None) -> dict[str, Any]:
    s = inv.serving
    summary: dict[str, Any] = {
        "model": inv.model.served_name or inv.model.name or inv.model.source or inv.model.path,
        "mode": s.mode, "tp": s.tensor_parallel_size, "pp": s.pipeline_parallel_size,
        "dp": s.data_parallel_size, "ep": s.enable_expert_parallel,
        "max_model_len": s.max_model_len, "nodes": len(inv.hosts),
    }
    if engine is not None:
        summary["engine"] = engine_summary(inv, engine)
    return summary


def engine_summary(inv: Inventory, engine: EngineIdentity) -> dict[str, Any]:
    """What the release meta records of its engine (history, rollback, prune)."""
    return kind_named(engine.kind).summary(inv, engine)


def plan_release(inv: Inventory, *, secrets: Mapping[str, str] | None = None,
                 nics: Mapping[str, str] | None = None,
                 device_ips: Mapping[str, Sequence[str]] | None = None,
                 weights_digest: str = "", engine: EngineIdentity | None = None) -> ReleasePlan:
    """Render twice: once with a placeholder id to learn the content hash, then for real
    (the files name their own release directory). `engine`: the engine's identity (image
    ID, venv digest): a different engine is a different release."""
    bundle = runtime_bundle()
    secret_digest = hashlib.sha256((secrets or {}).get("api_key", "").encode()).hexdigest()

    def render(release_id: str) -> dict[str, tuple[RenderedFile, ...]]:
        rendered = render_release(inv, release_id=release_id, secrets=secrets, nics=nics,
                                  device_ips=device_ips, engine=engine)
        return {node: tuple(sorted([*files, *bundle], key=lambda f: f.path))
                for node, files in rendered.items()}

    probe = render(ID_PLACEHOLDER)
    extra = [weights_digest, secret_digest]
    component = kind_named(engine.kind).release_component(engine) if engine else None
    if component is not None:
        extra.append(component)
    release_id = "r-" + _digest(probe, extra)[:12]
    files = render(release_id)
    names = {node: {f.path.removeprefix(f"{UNITS_DIR}/") for f in node_files
                    if f.path.startswith(f"{UNITS_DIR}/")} for node, node_files in files.items()}
    return ReleasePlan(
        release_id=release_id, files=files,
        engine_units={node: tuple(u for u in ENGINE_UNITS if u in names[node])
                      for node in files},
        side_units={node: tuple(u for u in SIDE_UNITS if u in names[node]) for node in files},
        summary=summarize(inv, engine),
    )


def weights_digest(node_files: Mapping[str, Sequence[tuple[str, str]]]) -> str:
    """Digest of which weight files (path, sha256) each node holds."""
    return hashlib.sha256(json.dumps({n: sorted(v) for n, v in sorted(node_files.items())},
                                     sort_keys=True).encode()).hexdigest()
