"""Run semantics, with controller-side modules (no host needs to be reachable) and one
real refused port on loopback for the unreachable case."""

from __future__ import annotations

import socket
import textwrap

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.load import load_inventory
from ascendctl.playbook import PlaybookRunner, RunOptions, load_playbook, templar_for
from ascendctl.playbook.reporting import Reporter


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_inventory(tmp_path, nodes: int = 4, extra_host: str = ""):
    hosts = "\n".join(
        f"        node{i}: {{ansible_host: 198.18.250.{10 + i}, rank: {i}}}"
        for i in range(nodes))
    text = textwrap.dedent(f"""
        all:
          vars:
            cluster: {{name: t, npus_per_node: 1}}
            model: {{path: /srv/m}}
            serving: {{mode: mp, pipeline_parallel_size: {nodes + (1 if extra_host else 0)}}}
            ssh: {{connect_timeout: 2, connect_retries: 0, known_hosts: {tmp_path}/kh}}
          children:
            nodes:
              hosts:
        """).lstrip("\n") + hosts + "\n" + extra_host
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path)


class Recorder(Reporter):
    def __init__(self):
        self.events = []

    def task_end(self, task, report):
        self.events.append((task.name, {h: r.status for h, r in report.results.items()}))


def run(tmp_path, playbook: str, inventory=None, run_state=None, **options):
    path = tmp_path / "play.yaml"
    path.write_text(textwrap.dedent(playbook).lstrip("\n"))
    inv = inventory or make_inventory(tmp_path)
    book = load_playbook(path)
    recorder = Recorder()
    runner = PlaybookRunner(book, inv, RunOptions(**options), recorder, templar_for(path),
                            run_state=run_state)
    report = runner.run()
    return report, recorder.events, runner


def test_failed_host_leaves_the_run_and_the_others_go_on(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: nodes
          tasks:
            - name: fail node1
              fail: {msg: "node1 is broken"}
              when: inventory_hostname == 'node1'
            - name: after
              debug: {msg: "{{ inventory_hostname }} still here"}
        - hosts: all
          tasks:
            - name: next play
              debug: {msg: hi}
        """)
    assert events[0] == ("fail node1", {"node0": "skipped", "node1": "failed",
                                        "node2": "skipped", "node3": "skipped"})
    assert events[1][1] == {"node0": "ok", "node2": "ok", "node3": "ok"}
    assert events[2][1] == {"node0": "ok", "node2": "ok", "node3": "ok"}
    assert report.exit_code() == Exit.FAILED
    recap = report.recap()
    assert recap["node1"]["failed"] == 1 and recap["node0"]["ok"] == 2


def test_register_changed_when_notify_and_handlers(tmp_path):
    report, events, runner = run(tmp_path, """
        - hosts: nodes
          vars:
            who: "{{ inventory_hostname }}-{{ rank }}"
          tasks:
            - name: produce
              debug: {msg: "{{ who }}"}
              register: out
              changed_when: rank % 2 == 0
              notify: announce
            - name: use
              assert:
                that: ["out.msg == inventory_hostname ~ '-' ~ rank", "out.changed == (rank % 2 == 0)"]
          handlers:
            - name: announce
              set_fact: {announced: "{{ out.msg }}"}
        """)
    assert events[0][1] == {"node0": "changed", "node1": "ok", "node2": "changed",
                            "node3": "ok"}
    assert events[1][1] == {n: "ok" for n in ("node0", "node1", "node2", "node3")}
    assert events[2] == ("announce", {"node0": "ok", "node2": "ok"})
    assert runner.states["node2"].facts["announced"] == "node2-2"
    assert "announced" not in runner.states["node1"].facts
    assert report.exit_code() == Exit.OK


def test_retries_until_and_delay(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: node0
          tasks:
            - name: third time lucky
              debug: {msg: x}
              register: r
              until: r.attempts >= 3
              retries: 5
              delay: 0.01
            - name: never
              debug: {msg: x}
              until: false
              retries: 2
              delay: 0.01
        """)
    first, second = report.plays[0].tasks
    assert first.results["node0"].status == "ok" and first.results["node0"].attempts == 3
    assert second.results["node0"].status == "failed"
    assert second.results["node0"].attempts == 3
    assert "still false after 3 attempts" in second.results["node0"].msg


def test_ignore_errors_and_failed_when(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: node0
          tasks:
            - name: tolerated
              fail: {msg: nope}
              ignore_errors: true
            - name: judged
              debug: {msg: "bad value"}
              failed_when: "'bad' in result.msg"
              ignore_errors: true
            - name: still running
              debug: {msg: ok}
        """)
    tasks = report.plays[0].tasks
    assert [t.results["node0"].status for t in tasks] == ["failed", "failed", "ok"]
    assert tasks[0].results["node0"].ignored and tasks[1].results["node0"].ignored
    assert report.exit_code() == Exit.OK
    assert report.recap()["node0"]["ignored"] == 2


def test_run_once_controller_check_sees_every_host(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: nodes
          tasks:
            - set_fact: {mtu: "{{ 9000 if rank != 2 else 1500 }}"}
            - name: uniform mtu
              run_once: true
              assert:
                that: "play_hosts | map('extract', hostvars, 'mtu') | unique | list | length == 1"
                fail_msg: "MTU differs across nodes"
        """)
    check = report.plays[0].tasks[1]
    assert set(check.results) == {"node0", "node1", "node2", "node3"}
    assert all(r.status == "failed" for r in check.results.values())
    assert check.results["node3"].msg == "MTU differs across nodes"
    assert report.exit_code() == Exit.FAILED


def test_rank_order_runs_one_host_at_a_time_in_rank_order(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: nodes
          order: rank
          tasks:
            - name: start
              debug: {msg: "{{ rank }}"}
            - name: wait
              debug: {msg: ready}
        """)
    assert [list(e[1]) for e in events] == [["node0"], ["node0"], ["node1"], ["node1"],
                                            ["node2"], ["node2"], ["node3"], ["node3"]]


def test_serial_batches(tmp_path):
    _, events, _ = run(tmp_path, """
        - hosts: nodes
          serial: 3
          tasks:
            - debug: {msg: x}
        """)
    assert [list(e[1]) for e in events] == [["node0", "node1", "node2"], ["node3"]]


def test_any_errors_fatal_stops_everything(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: nodes
          any_errors_fatal: true
          tasks:
            - fail: {msg: x}
              when: rank == 3
            - name: not reached
              debug: {msg: x}
        """)
    assert [e[0] for e in events] == ["fail x"]
    assert "any_errors_fatal" in report.aborted
    assert report.exit_code() == Exit.FAILED


def test_always_play_runs_after_a_stop_on_every_host_it_names(tmp_path):
    report, events, _ = run(tmp_path, """
        - name: work
          hosts: nodes
          any_errors_fatal: true
          tasks:
            - fail: {msg: broken}
              when: rank == 0
        - name: skipped after the stop
          hosts: nodes
          tasks:
            - name: not reached
              debug: {msg: x}
        - name: cleanup
          hosts: head
          always: true
          tasks:
            - name: give back the lock
              debug: {msg: released}
        """)
    assert [e[0] for e in events] == ["fail broken", "give back the lock"]
    assert events[-1][1] == {"node0": "ok"}      # node0 had failed, cleanup still runs there
    assert report.exit_code() == Exit.FAILED     # the failure stays in the report


def test_tags_limit_and_extra_vars(tmp_path):
    book = """
        - hosts: nodes
          tasks:
            - name: tagged a
              debug: {msg: "{{ greeting }}"}
              tags: [a]
            - name: tagged b
              debug: {msg: x}
              tags: [b]
            - name: always
              debug: {msg: x}
              tags: [always]
            - name: never
              debug: {msg: x}
              tags: [never]
            - name: untagged
              debug: {msg: x}
        """
    report, events, _ = run(tmp_path, book, tags=frozenset({"a"}), limit="node1:node3",
                            extra_vars={"greeting": "hello"})
    assert [e[0] for e in events] == ["tagged a", "always"]
    assert list(events[0][1]) == ["node1", "node3"]
    assert report.plays[0].tasks[0].results["node1"].msg == "hello"
    _, events, _ = run(tmp_path, book, skip_tags=frozenset({"a", "always"}),
                       extra_vars={"greeting": "x"})
    assert [e[0] for e in events] == ["tagged b", "untagged"]
    _, events, _ = run(tmp_path, book, tags=frozenset({"never"}),
                       extra_vars={"greeting": "x"})
    assert [e[0] for e in events] == ["always", "never"]


def test_host_patterns_are_resolved_before_any_connection(tmp_path):
    inv = make_inventory(tmp_path)
    path = tmp_path / "p.yaml"
    path.write_text("- hosts: 'nodes:!node1:!node3'\n  tasks: []\n"
                    "- hosts: 'node*:&head'\n  tasks: []\n- hosts: followers\n  tasks: []\n")
    runner = PlaybookRunner(load_playbook(path), inv, RunOptions(limit="node0,node1,node3"),
                            Reporter(), templar_for(path))
    planned = runner.plan()
    assert [[h.name for h in hosts] for _, hosts in planned] == \
        [["node0"], ["node0"], ["node1", "node3"]]
    path.write_text("- hosts: nodez\n  tasks: []\n")
    runner = PlaybookRunner(load_playbook(path), inv, RunOptions(), Reporter(),
                            templar_for(path))
    with pytest.raises(InputError) as info:
        runner.run()
    assert info.value.line == 1 and "nodez" in str(info.value)
    assert runner.pool is None          # nothing was contacted


def test_confirm_needs_yes_when_nobody_can_answer(tmp_path):
    with pytest.raises(InputError, match="--yes"):
        run(tmp_path, """
            - hosts: nodes
              confirm: "this restarts the cluster"
              tasks: [{debug: {msg: x}}]
            """)
    report, _, _ = run(tmp_path, """
        - hosts: nodes
          confirm: "this restarts the cluster"
          tasks: [{debug: {msg: x}}]
        """, yes=True)
    assert report.exit_code() == Exit.OK


def test_unreachable_host_is_reported_and_the_others_finish(tmp_path):
    extra = (f"        dead: {{ansible_host: 127.0.0.1, ansible_port: {closed_port()}, "
             "rank: 1}\n")
    inv = make_inventory(tmp_path, nodes=1, extra_host=extra)
    report, events, _ = run(tmp_path, """
        - hosts: dead
          tasks:
            - ping:
        - hosts: all
          tasks:
            - debug: {msg: x}
        """, inventory=inv)
    dead = report.plays[0].tasks[0].results["dead"]
    assert dead.status == "unreachable" and "connection refused" in dead.msg
    assert dead.error_kind == "refused"
    assert events[1][1] == {"node0": "ok"}
    assert report.exit_code() == Exit.UNREACHABLE
    assert report.recap()["dead"]["unreachable"] == 1


def test_check_mode_skips_modules_that_cannot_predict(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: node0
          tasks:
            - command: [reboot]
            - debug: {msg: "{{ check_mode }}"}
        """, check=True)
    reboot, debug = report.plays[0].tasks
    assert reboot.results["node0"].status == "skipped"
    assert "check mode" in reboot.results["node0"].msg
    assert debug.results["node0"].msg == "true"
    assert report.exec_counts == {"node0": 0}


def test_play_vars_are_rendered_when_used(tmp_path):
    report, events, _ = run(tmp_path, """
        - hosts: node0
          vars:
            greeting: "hello {{ who.msg }}"
            broken: "{{ deploy.rooot }}"
          tasks:
            - debug: {msg: world}
              register: who
            - name: uses greeting
              debug: {msg: "{{ greeting }}"}
            - name: uses broken
              debug: {msg: "{{ broken }}"}
        """)
    _, greet, broken = report.plays[0].tasks
    assert greet.results["node0"].msg == "hello world"
    assert broken.results["node0"].status == "failed"
    assert "play variable 'broken'" in broken.results["node0"].msg
    assert "rooot" in broken.results["node0"].msg
