"""The one line (and exit code) a deploy or rollback ends with, from what its steps did.

    0  deployed, or nothing to change
    1  a step failed; when the engines had been touched and restoring the previous release
       failed too (or there was none), the line says so and names each node's release
    4  a node unreachable before the engines were touched
    5  the lock: another deploy holds it, or this deploy lost it (stopped at the next step)
    6  a step after the stop failed and every node is back on the previous release
  130  interrupted
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ascendctl.exitcodes import Exit

if TYPE_CHECKING:
    from ascendctl.deploy.run import Outcome
    from ascendctl.playbook.results import RunReport
    from ascendctl.playbook.state import FailedTask


def deploy_verdict(outcome: "Outcome", report: "RunReport", failure: Optional["FailedTask"],
                   *, verb: str, check: bool) -> tuple[Exit, str]:
    if outcome.lock_holder is not None:
        return Exit.LOCKED, f"{verb} refused: {failure.msg if failure else 'the cluster is locked'}"
    if outcome.lock_lost:
        where = ("the engines were not touched" if not outcome.engines_touched else
                 "it stopped while switching the engines; the new holder owns the cluster now")
        return Exit.LOCKED, f"{verb} stopped: {outcome.lock_lost}; {where}"
    if report.interrupted:
        touched = ("the engines were being switched: check `ascendctl status` and "
                   "`ascendctl history`, then deploy or roll back (the lock is kept until "
                   "then: --force-unlock --really)" if outcome.engines_touched
                   else "the engines were not touched")
        return Exit.INTERRUPTED, f"{verb} interrupted; {touched}"
    if outcome.engines_touched and failure is not None:
        step = outcome.failed_step or failure.task
        node = outcome.failed_node or failure.host
        reason = outcome.reason or failure.msg
        group = f" (serving group {outcome.failed_group})" \
            if outcome.replicated and outcome.failed_group else ""
        where = f"{verb} failed at step '{step}' on {node}{group}: {reason}"
        if outcome.rolled_back_to and outcome.replicated:
            return Exit.ROLLED_BACK, f"{where}. {_groups_after_failure(outcome)}"
        if outcome.rolled_back_to:
            return Exit.ROLLED_BACK, (f"{where}. Every node is back on {outcome.rolled_back_to} "
                                      f"and serving; {outcome.release_id} is marked failed.")
        nodes = _currents(outcome)
        if outcome.rollback_failed:
            return Exit.FAILED, (f"{where}. Restoring {outcome.previous} failed: "
                                 f"{outcome.rollback_failed}.{nodes}")
        if outcome.failed_step is None:
            return Exit.FAILED, (f"{where}. No rescue ran (is the rescue play missing?): the "
                                 "nodes may be on different releases; run `ascendctl "
                                 "rollback`.")
        return Exit.FAILED, (f"{where}. There was no previous release: the engines are "
                             f"stopped and {outcome.release_id} is marked failed.{nodes}")
    code = report.exit_code()
    if code != Exit.OK:
        detail = f": {failure.task} on {failure.host}: {failure.msg}" if failure else \
            (f": {report.aborted}" if report.aborted else "")
        return code, f"{verb} stopped before touching the engines{detail}"
    if check:
        return Exit.OK, f"{verb} --check: nothing was changed"
    if outcome.changed and outcome.replicated:
        previous = ", ".join(sorted({p or "none" for p in outcome.group_previous.values()}))
        return Exit.OK, (f"{outcome.release_id} is serving on serving groups "
                         f"{', '.join(outcome.switched_groups)}, switched one at a time "
                         f"(previous: {previous}); first completion: {outcome.completion!r}")
    if outcome.changed:
        return Exit.OK, (f"{outcome.release_id} is serving (previous: "
                         f"{outcome.previous or 'none'}); first completion: "
                         f"{outcome.completion!r}")
    return Exit.OK, f"{outcome.release_id or 'the release'} was already serving: nothing changed"


def _groups_after_failure(outcome: "Outcome") -> str:
    """Where each serving group stands after one group's switch failed and was undone."""
    parts = []
    for group in outcome.restored_groups:
        parts.append(f"serving group {group} is back on {outcome.rolled_back_to} and serving")
    for group in outcome.switched_groups:
        parts.append(f"{group} serves {outcome.release_id} (switched before the failure)")
    untouched = [g for g in outcome.group_previous
                 if g not in outcome.restored_groups and g not in outcome.switched_groups]
    for group in untouched:
        parts.append(f"{group} was not touched (still serving "
                     f"{outcome.group_previous[group] or 'nothing'})")
    text = "; ".join(parts)
    return f"{text[:1].upper()}{text[1:]}; the rollout stopped and {outcome.release_id} is " \
        "marked failed where it does not serve."


def _currents(outcome: "Outcome") -> str:
    if not outcome.currents:
        return ""
    return " Nodes now: " + ", ".join(f"{node}={current or 'none'}"
                                      for node, current in outcome.currents.items()) + "."
