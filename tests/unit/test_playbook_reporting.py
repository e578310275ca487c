"""Recap, JSON, JUnit XML and plain console output of real (controller-only) runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from junitparser import Error, Failure, JUnitXml, Skipped

from ascendctl.exitcodes import Exit
from ascendctl.junit import junit_xml
from ascendctl.playbook.reporting import junit_report

PLAYBOOK = """
- name: report me
  hosts: nodes
  tasks:
    - name: greet
      debug: {msg: "hello {{ inventory_hostname }}"}
    - name: break node1
      fail: {msg: "node1 <is> broken & \\"quoted\\""}
      when: inventory_hostname == 'node1'
    - name: secret
      debug: {msg: "token-123"}
      no_log: true
"""


def inventory(tmp_path) -> str:
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent(f"""
        all:
          vars:
            cluster: {{name: t, npus_per_node: 1}}
            model: {{path: /srv/m}}
            serving: {{mode: mp, pipeline_parallel_size: 2}}
            ssh: {{known_hosts: {tmp_path}/kh}}
          children:
            nodes:
              hosts:
                node0: {{ansible_host: 198.18.250.10, rank: 0}}
                node1: {{ansible_host: 198.18.250.11, rank: 1}}
        """))
    return str(path)


def ascendctl(*args, env=None):
    environ = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=120, env=environ)


def test_json_report_has_every_task_host_and_the_recap(tmp_path):
    book = tmp_path / "p.yaml"
    book.write_text(PLAYBOOK)
    proc = ascendctl("play", str(book), "-i", inventory(tmp_path), "--json")
    assert proc.returncode == Exit.FAILED, proc.stderr
    data = json.loads(proc.stdout)
    assert data["exit_code"] == 1 and data["check"] is False
    tasks = data["plays"][0]["tasks"]
    assert [t["name"] for t in tasks] == ["greet", "break node1", "secret"]
    assert tasks[0]["hosts"]["node0"] == {"status": "ok", "duration_s": tasks[0]["hosts"]
                                          ["node0"]["duration_s"], "msg": "hello node0"}
    assert tasks[1]["hosts"]["node1"]["status"] == "failed"
    assert tasks[1]["hosts"]["node0"]["status"] == "skipped"
    assert "node1" not in tasks[2]["hosts"]          # failed hosts leave the run
    assert "token-123" not in proc.stdout            # no_log hides the output
    assert data["recap"]["node0"] == {"ok": 2, "changed": 0, "failed": 0, "skipped": 1,
                                      "unreachable": 0, "ignored": 0}
    assert data["recap"]["node1"]["failed"] == 1
    assert data["remote_executions"] == {"node0": 0, "node1": 0}


def test_junit_has_one_testcase_per_task_and_host(tmp_path):
    book = tmp_path / "p.yaml"
    book.write_text(PLAYBOOK)
    junit = tmp_path / "out" / "play.xml"
    proc = ascendctl("play", str(book), "-i", inventory(tmp_path), "--junit", str(junit))
    assert proc.returncode == Exit.FAILED
    xml = JUnitXml.fromfile(str(junit))
    cases = [case for suite in xml for case in suite]
    assert sorted(c.name for c in cases) == sorted([
        "greet [node0]", "greet [node1]", "break node1 [node0]", "break node1 [node1]",
        "secret [node0]"])
    by_name = {c.name: c for c in cases}
    failure = by_name["break node1 [node1]"].result[0]
    assert isinstance(failure, Failure)
    assert failure.message == 'node1 <is> broken & "quoted"'
    assert isinstance(by_name["break node1 [node0]"].result[0], Skipped)
    assert by_name["greet [node0]"].is_passed
    assert "token-123" not in junit.read_text()
    suite = next(iter(xml))
    assert (suite.tests, suite.failures, suite.skipped) == (5, 1, 1)


def test_unreachable_is_a_junit_error(tmp_path):
    from ascendctl.playbook.results import PlayReport, RunReport, TaskHostResult, TaskReport

    report = RunReport(playbook="x.yaml", inventory="i.yaml")
    play = PlayReport(name="p", hosts=["a"], order="parallel")
    task = TaskReport(name="t", module="ping", file="x.yaml", line=3)
    task.results["a"] = TaskHostResult(host="a", status="unreachable",
                                       msg="connection refused by 198.18.0.1:22",
                                       error_kind="refused")
    play.tasks.append(task)
    report.plays.append(play)
    path = tmp_path / "j.xml"
    path.write_bytes(junit_xml(junit_report(report)))
    case = next(iter(next(iter(JUnitXml.fromfile(str(path))))))
    assert isinstance(case.result[0], Error)
    assert case.result[0].type == "refused"
    assert report.exit_code() == Exit.UNREACHABLE


def test_console_output_is_plain_when_piped(tmp_path):
    book = tmp_path / "p.yaml"
    book.write_text(PLAYBOOK)
    proc = ascendctl("play", str(book), "-i", inventory(tmp_path))
    out = proc.stdout
    assert "\x1b[" not in out
    assert "PLAY [report me] node0, node1 (parallel)" in out
    assert "TASK [break node1]" in out
    assert "failed" in out and "node1 <is> broken" in out
    assert "RECAP" in out
    assert "node1  ok=1  changed=0  failed=1" in out
    assert "token-123" not in out


def test_list_tasks_contacts_nothing(tmp_path):
    book = tmp_path / "p.yaml"
    book.write_text(PLAYBOOK)
    book.write_text(PLAYBOOK.replace("  hosts: nodes\n", "  hosts: nodes\n  confirm: sure?\n", 1))
    proc = ascendctl("play", str(book), "-i", inventory(tmp_path), "--list-tasks", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [t["name"] for t in data["plays"][0]["tasks"]] == ["greet", "break node1", "secret"]
    assert data["plays"][0]["hosts"] == ["node0", "node1"]


def test_bad_playbook_exits_2_with_one_line(tmp_path):
    book = tmp_path / "p.yaml"
    book.write_text("- hosts: all\n  tasks:\n    - debugg: {msg: x}\n")
    proc = ascendctl("play", str(book), "-i", inventory(tmp_path))
    assert proc.returncode == Exit.USAGE
    assert proc.stderr.strip().splitlines() == [
        f"error: {book}:3: plays[0].tasks[0].debugg: unknown task key or module 'debugg'; "
        "did you mean 'debug'?"]
