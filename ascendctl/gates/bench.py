"""The gate contexts of `ascendctl bench --compare/--envelope/--soak/--long-tail`: what
each group's head serves now, the release it replaced, and a head of another group that
serves that one (side by side); for --compare A B, the head serving B against A."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from ascendctl.gates.context import GateContext
from ascendctl.gates.head import ENTRY, GateError, GateHead, QUICK_TIMEOUT_S
from ascendctl.transport.nodecall import NodeCallError, call_node

if TYPE_CHECKING:
    from ascendctl.inventory import Inventory
    from ascendctl.inventory.promotion import PromotionSpec


def serving(inv: "Inventory", pool: Any) -> dict[str, tuple["Inventory", dict[str, Any]]]:
    """Each serving group's view and what its head serves (promotion_node locate)."""
    out = {}
    for view in inv.group_views():
        head = view.head
        try:
            where = call_node(pool.conn(head.name), node=head.name, python=inv.deploy.python,
                              entry=ENTRY, timeout=QUICK_TIMEOUT_S,
                              request={"op": "locate", "kwargs": {"root": inv.deploy.root}})
        except NodeCallError as err:
            raise GateError(str(err)) from None
        out[view.serving_groups[0].name] = (view, where)
    return out


def gate_contexts(inv: "Inventory", views: list["Inventory"], spec: "PromotionSpec",
                  pool: Any, say: Callable[[str], None], *,
                  compared: Optional[tuple[str, str]] = None) -> list[GateContext]:
    groups = serving(inv, pool)
    wanted = [v.serving_groups[0].name for v in views]

    def head_of(group: str, release: str) -> GateHead:
        view = groups[group][0]
        return GateHead(view, view.head, pool.conn(view.head.name), release)

    def serving_release(release: str, among: list[str]) -> Optional[str]:
        return next((g for g in among if groups[g][1].get("current") == release), None)

    def context(group: str, release: str, previous: Optional[str]) -> GateContext:
        view = groups[group][0]
        others = [g for g in groups if g != group]
        live_group = serving_release(previous, others) if previous else None
        return GateContext(
            inv=view, spec=spec, group=group, candidate=head_of(group, release),
            previous=previous,
            live=head_of(live_group, previous) if live_group and previous else None,
            followers=[GateHead(view, h, pool.conn(h.name), release)
                       for h in view.hosts if h.name != view.head.name],
            say=say)

    if compared is not None:
        previous, candidate = compared
        group = serving_release(candidate, wanted)
        if group is None:
            now = ", ".join(f"{g}: {groups[g][1].get('current') or 'nothing'}" for g in wanted)
            raise GateError(f"no serving group's head serves {candidate} ({now}); --compare "
                            "measures the second release where a group serves it")
        return [context(group, candidate, previous)]
    out = []
    for group in wanted:
        where = groups[group][1]
        if not where.get("current"):
            raise GateError(f"{groups[group][0].head.name}: nothing is deployed")
        out.append(context(group, where["current"], where.get("previous")))
    return out
