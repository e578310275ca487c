"""Rescue plays, stop requests and the run state handed to modules (controller-side
modules only: no host needs to be reachable)."""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict

from ascendctl.exitcodes import Exit
from ascendctl.playbook.modules import Module, ModuleResult, register_module
from ascendctl.playbook.results import TaskStatus
from ascendctl.playbook.state import RunState
from tests.unit.test_playbook_runner import run

STOP_ARGS = {"rescue": True}


class Counter:
    """A typed part of the run state (what a deploy keeps in its DeployRun)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.closed = False

    def template_vars(self) -> dict:
        return {"counted": len(self.seen)}

    def close(self) -> None:
        self.closed = True


@register_module("test_count")
class CountModule(Module):
    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        stop: str = ""
        rescue: bool = True

    def run(self, ctx, args):
        counter = ctx.run_state.part(Counter, Counter)
        counter.seen.append(ctx.host.name)
        if args.stop:
            # As a lock heartbeat would: from another thread, between steps.
            thread = threading.Thread(target=ctx.run_state.request_stop, args=(args.stop,),
                                      kwargs={"rescue": args.rescue})
            thread.start()
            thread.join()
        return ModuleResult(msg=f"seen {len(counter.seen)}")


def names(events):
    return [name for name, _ in events]


BOOK = """
    - name: work
      hosts: nodes
      any_errors_fatal: true
      tasks:
        - name: count
          test_count: {}
          run_once: true
        - name: maybe fail
          fail: {msg: "broken on {{ inventory_hostname }}"}
          when: inventory_hostname == 'node2' and {fail}
        - name: after the failure
          debug: {msg: x}
    - name: restore
      hosts: nodes
      rescue: true
      tasks:
        - name: rescue sees the failure
          debug: {msg: "{{ failed_task.name }} on {{ failed_task.host }}: {{ failed_task.msg }}"}
          run_once: true
    - name: cleanup
      hosts: head
      always: true
      tasks:
        - name: give back
          debug: {msg: "counted {{ counted }}"}
    """


def test_rescue_play_runs_after_a_failure_on_every_host_and_sees_failed_task(tmp_path):
    report, events, runner = run(tmp_path, BOOK.replace("{fail}", "true"))
    assert names(events) == ["count", "maybe fail", "rescue sees the failure", "give back"]
    rescue = report.plays[1].tasks[0]
    assert set(rescue.results) == {"node0", "node1", "node2", "node3"}   # failed node too
    assert rescue.results["node0"].msg == "maybe fail on node2: broken on node2"
    assert report.plays[2].tasks[0].results["node0"].msg == "counted 1"
    assert runner.run_state.failure.host == "node2"
    assert runner.run_state.failure.where.endswith("play.yaml:8")
    assert report.exit_code() == Exit.FAILED
    assert runner.run_state.find(Counter).closed


def test_rescue_play_does_not_run_when_nothing_failed(tmp_path):
    report, events, runner = run(tmp_path, BOOK.replace("{fail}", "false"))
    assert names(events) == ["count", "maybe fail", "after the failure", "give back"]
    assert [p.name for p in report.plays] == ["work", "cleanup"]
    assert runner.run_state.failure is None
    assert report.exit_code() == Exit.OK


def test_a_stop_request_stops_at_the_next_task_and_may_forbid_the_rescue(tmp_path):
    book = """
        - name: work
          hosts: nodes
          tasks:
            - name: count and stop
              test_count: {stop: "lost the lock", rescue: RESCUE}
              run_once: true
            - name: never runs
              debug: {msg: x}
        - name: next play
          hosts: nodes
          tasks:
            - name: never runs either
              debug: {msg: x}
        - name: restore
          hosts: nodes
          rescue: true
          tasks:
            - name: rescue
              debug: {msg: x}
        - name: cleanup
          hosts: head
          always: true
          tasks:
            - name: give back
              debug: {msg: x}
        """
    report, events, _ = run(tmp_path, book.replace("RESCUE", "false"))
    assert names(events) == ["count and stop", "give back"]
    assert report.aborted == "stopped: lost the lock"
    assert report.exit_code() == Exit.FAILED
    report, events, _ = run(tmp_path, book.replace("RESCUE", "true"))
    assert names(events) == ["count and stop", "rescue", "give back"]


def test_the_run_state_is_the_runners_not_a_global(tmp_path):
    shared = RunState()
    counter = shared.add(Counter())
    book = """
        - hosts: nodes
          tasks:
            - test_count: {}
            - name: read it back
              assert: {that: "counted == 4"}
        """
    report, events, runner = run(tmp_path, book, run_state=shared)
    assert runner.run_state is shared and sorted(counter.seen) == [
        "node0", "node1", "node2", "node3"]
    assert events[1][1] == {n: "ok" for n in ("node0", "node1", "node2", "node3")}
    _, _, other = run(tmp_path, book)
    assert other.run_state is not shared and other.run_state.find(Counter).seen != []
    assert len(counter.seen) == 4                     # the second run did not touch it


def test_task_status_is_an_enum_that_reads_as_text(tmp_path):
    report, events, _ = run(tmp_path, BOOK.replace("{fail}", "true"))
    result = report.plays[0].tasks[1].results["node2"]
    assert result.status is TaskStatus.FAILED and result.status == "failed"
    assert {"failed": 1}[result.status] == 1 and f"{result.status:<8}|" == "failed  |"
    assert report.as_dict()["plays"][0]["tasks"][1]["hosts"]["node2"]["status"] == "failed"
    assert report.recap()["node2"]["failed"] == 1
