"""What a deploy says at the end, and its exit code, for each way it can end."""

from __future__ import annotations

from ascendctl.deploy.nodestate import LockHolder
from ascendctl.deploy.run import Outcome
from ascendctl.deploy.verdict import deploy_verdict
from ascendctl.exitcodes import Exit
from ascendctl.playbook.results import PlayReport, RunReport, TaskHostResult, TaskReport
from ascendctl.playbook.state import FailedTask


def report(failed_on: str | None = None, status: str = "failed") -> RunReport:
    run = RunReport(playbook="deploy.yaml", inventory="inv.yaml")
    play = PlayReport(name="commit", hosts=["node0", "node1"], order="parallel")
    task = TaskReport(name="point current", module="release_commit", file="d.yaml", line=3)
    for node in ("node0", "node1"):
        task.results[node] = TaskHostResult(host=node, status=status if node == failed_on
                                            else "changed", msg="lost" if node == failed_on
                                            else "")
    play.tasks.append(task)
    run.plays.append(play)
    return run


FAILED_COMMIT = FailedTask(play="commit", task="point current", host="node1",
                           msg="unreachable: connection lost", where="d.yaml:3")


def test_a_commit_that_lost_a_node_is_reported_as_such_not_as_untouched():
    outcome = Outcome(release_id="r-new", previous="r-old", engines_touched=True,
                      failed_step="point current", failed_node="node1",
                      reason="unreachable: connection lost", rolled_back_to="r-old")
    code, line = deploy_verdict(outcome, report("node1", "unreachable"), FAILED_COMMIT,
                                verb="deploy", check=False)
    assert code == Exit.ROLLED_BACK
    assert line.startswith("deploy failed at step 'point current' on node1")
    assert "back on r-old" in line and "r-new is marked failed" in line
    assert "before touching" not in line


def test_a_failed_restore_names_every_nodes_release():
    outcome = Outcome(release_id="r-new", previous="r-old", engines_touched=True,
                      failed_step="point current", failed_node="node1", reason="lost",
                      rollback_failed="wait for the nodes failed on node1: unreachable",
                      currents={"node0": "r-old", "node1": "unreachable"})
    code, line = deploy_verdict(outcome, report("node1"), FAILED_COMMIT, verb="deploy",
                                check=False)
    assert code == Exit.FAILED
    assert "Restoring r-old failed" in line
    assert "Nodes now: node0=r-old, node1=unreachable." in line


def test_failures_before_the_stop_and_the_lock():
    untouched = Outcome(release_id="r-new", previous="r-old")
    gate = FailedTask(play="preflight gate", task="every check passes", host="node0",
                      msg="fail: 1 fail", where="d.yaml:9")
    code, line = deploy_verdict(untouched, report("node0"), gate, verb="deploy", check=False)
    assert code == Exit.FAILED and "stopped before touching the engines: every check" in line

    locked = Outcome(lock_holder=LockHolder(holder="bob@jump", since="t"))
    lock_task = FailedTask(play="lock", task="deploy lock", host="node0",
                           msg="cluster c is locked by bob@jump since t", where="d.yaml:1")
    code, line = deploy_verdict(locked, report("node0"), lock_task, verb="deploy", check=False)
    assert code == Exit.LOCKED and "locked by bob@jump" in line

    lost = Outcome(lock_lost="the deploy lock on node0 was taken over (removed)")
    code, line = deploy_verdict(lost, report("node0"), None, verb="rollback", check=False)
    assert code == Exit.LOCKED
    assert line == ("rollback stopped: the deploy lock on node0 was taken over (removed); "
                    "the engines were not touched")


def test_success_and_no_op():
    done = Outcome(release_id="r-new", previous="r-old", changed=True, completion=" hi")
    assert deploy_verdict(done, report(), None, verb="deploy", check=False) == (
        Exit.OK, "r-new is serving (previous: r-old); first completion: ' hi'")
    same = Outcome(release_id="r-old", previous="r-old")
    assert deploy_verdict(same, report(), None, verb="deploy", check=False)[1] == \
        "r-old was already serving: nothing changed"


def test_really_without_force_unlock_is_bad_input_before_anything_runs(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "inventory.example.yaml"
    for args in (["deploy", "--really"], ["rollback", "--really"]):
        done = subprocess.run([sys.executable, "-m", "ascendctl", *args, "-i", str(example),
                               "--yes"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == Exit.USAGE, done.stderr
        assert "--really: --really only goes with --force-unlock" in done.stderr
        assert "Traceback" not in done.stderr
