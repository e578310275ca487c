"""The order a playbook's tasks hand state to each other, checked when it is loaded.

A module declares what it needs from earlier tasks and what it provides (`Module.order`).
Walking the plays in the order they run, every task's needs must have been provided by a
task before it that certainly runs:

- a task under `when:` may not run, so what it provides does not count;
- a `rescue` or `always` play may run right after the first play of its sequence failed
  (the playbook, or its rolling block), so it may count only on what was provided before
  that sequence began;
- handlers run at the end of their play: their needs are checked after its tasks, and they
  provide nothing.

So a copied playbook that starts the engines before their unit files are installed, or
switches anything before the deploy lock is taken, is refused at load time naming the task,
its file and line, what is missing and which module provides it, instead of failing half
way through a switch.
"""

from __future__ import annotations

from ascendctl.errors import InputError
from ascendctl.playbook.model import Play, Playbook, Rolling, Task
from ascendctl.playbook.modules import MODULES


def check_order(playbook: Playbook) -> None:
    """Raise InputError at the first task whose needs no earlier task provides."""
    walk = _Walk()
    for item in playbook.plays:
        if isinstance(item, Rolling):
            begun = frozenset(walk.provided)
            for play in item.plays:
                walk.play(play, begun)
        else:
            walk.play(item, frozenset())


class _Walk:
    def __init__(self) -> None:
        self.provided: set[str] = set()
        self.conditional: set[str] = set()    # provided only by tasks under `when:`

    def play(self, play: Play, sequence_start: frozenset[str]) -> None:
        # A rescue or always play may run after its sequence's first play failed, and what
        # it provides is not certain after it (a rescue may not run at all).
        fallback = play.rescue or play.always
        available = set(sequence_start) if fallback else self.provided
        for task in play.tasks:
            self.require(task, available, play)
            provides = _order_of(task)[1]
            if task.when is None:
                available.update(provides)
            else:
                self.conditional.update(provides)
        for handler in play.handlers:
            self.require(handler, available, play)

    def require(self, task: Task, available: set[str], play: Play) -> None:
        missing = [need for need in _order_of(task)[0] if need not in available]
        if not missing:
            return
        need = missing[0]
        producers = sorted(name for name, cls in MODULES.items() if need in cls.provides)
        by = f" (provided by {', '.join(producers)})" if producers else ""
        if play.rescue or play.always:
            kind = "rescue" if play.rescue else "always"
            why = (f"a {kind} play may run right after the first play of its sequence "
                   "failed, so only what was provided before that sequence counts")
        elif need in self.conditional:
            why = "an earlier task provides it only under `when:`, so it may not have run"
        else:
            why = "no earlier task provides it: move this task after one that does"
        raise InputError(f"{task.module} needs `{need}`{by}; {why}", file=task.where.file,
                         line=task.where.line, field=task.where.field or None)


def _order_of(task: Task) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cls = MODULES.get(task.module)
    if cls is None:
        return (), ()
    return cls.order(task.args)
