"""Make the release's engine present on every node, before any engine is stopped.

    plan = plan_engine(inv, pool)            # what the release runs (part of its id)
    ensure_engine(inv, pool, plan)           # push, load / build; refuses naming nodes

What "present" means is the engine kind's (ascendctl/engine/kinds/): an image archive
relayed into the stores and loaded where the image ID is missing, an image every node
must already hold, a venv built offline from the relayed wheels, nothing for a host
executable. Here: the order — one read per node, the relay of what the kind's plan
carries to the nodes that lack it (a node the kind says can do without, e.g. one that
holds every layer of the image, gets nothing), then the kind's load or build there.

Every failure raises EngineError naming the node, and happens before the deploy touches
a running engine, so the previous release keeps serving.
"""

from __future__ import annotations

from collections.abc import Mapping

from ascendctl.engine.identity import EngineError, EngineIdentity
from ascendctl.engine.kinds import kind_named, kind_of
from ascendctl.engine.kinds.base import EnginePlan, NodeEngine
from ascendctl.weights.files_push import files_plan
from ascendctl.weights.push import push

__all__ = ["EnginePlan", "NodeEngine", "engine_status", "ensure_engine", "kept_engines",
           "plan_engine"]


def plan_engine(inv, pool=None, *, cache=None, hosts=None) -> EnginePlan:
    """The engine's identity and what has to travel (read on this machine where the kind
    can; a container engine without an archive asks the nodes)."""
    return kind_of(inv.engine).plan(inv, pool, cache=cache,
                                    hosts=inv.hosts if hosts is None else hosts)


def engine_status(inv, pool, plan: EnginePlan, *, hosts=None) -> dict[str, NodeEngine]:
    """What `ensure_engine` would do on each node (one read per node; changes nothing)."""
    return kind_of(inv.engine).status(inv, pool, plan,
                                      hosts=inv.hosts if hosts is None else hosts)


def ensure_engine(inv, pool, plan: EnginePlan, *, show_progress: bool = True,
                  hosts=None) -> dict[str, NodeEngine]:
    """Push what must travel, then load or build it on every node that lacks it. A node
    that already has it costs one read and nothing travels."""
    kind = kind_of(inv.engine)
    hosts = inv.hosts if hosts is None else hosts
    status = kind.status(inv, pool, plan, hosts=hosts)
    need = [h for h in hosts if status[h.name].changed]
    if not need:
        return status

    relay_to = [h for h in need if status[h.name].relay]
    if relay_to:
        summary = push(inv, files_plan(inv, plan.objects, relay_to),
                       show_progress=show_progress, pool=pool)
        if not summary.ok:
            raise EngineError(f"the {kind.relayed} did not reach every node: "
                              + "; ".join(summary.errors))
    done = kind.install(inv, pool, plan, need=need)
    return {h.name: done.get(h.name, status[h.name]) for h in hosts}


def kept_engines(identities: Mapping[str, EngineIdentity]) -> tuple[list[str], list[str]]:
    """(image IDs, venv digests) the kept releases use (release id -> its identity)."""
    held = [kind_named(i.kind).node_objects(i) for i in identities.values()]
    return (sorted({image for objects in held for image in objects.images}),
            sorted({venv for objects in held for venv in objects.venvs}))
