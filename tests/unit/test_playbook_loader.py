"""Malformed playbooks: one clear error naming file, line and field, before any host."""

from __future__ import annotations

import textwrap

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.playbook import load_playbook


def write(tmp_path, text: str, name: str = "play.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "ok.j2").write_text("x={{ 1 }}\n")
    return path


CASES = [
    # (playbook text, line, field, message fragment)
    ("""
     - name: p
       hosts: all
       taks: []
     """, 3, "plays[0].taks", "unknown play key 'taks'; did you mean 'tasks'?"),
    ("""
     - name: p
       tasks: []
     """, 1, "plays[0]", "needs `hosts`"),
    ("""
     - hosts: all
       tasks:
         - name: t
           comand: [true]
     """, 4, "plays[0].tasks[0].comand", "did you mean 'command'?"),
    ("""
     - hosts: all
       tasks:
         - name: two modules
           command: [true]
           shell: "true"
     """, 5, "plays[0].tasks[0].shell", "a task runs one module"),
    ("""
     - hosts: all
       tasks:
         - name: none
           register: x
     """, 3, "plays[0].tasks[0]", "names no module"),
    ("""
     - hosts: all
       tasks:
         - template: {src: ok.j2, dset: /etc/x}
     """, 3, "plays[0].tasks[0].template.dset", "unknown argument 'dset'; did you mean 'dest'?"),
    ("""
     - hosts: all
       tasks:
         - template: {src: ok.j2}
     """, 3, "plays[0].tasks[0].template.dest", "missing required argument 'dest'"),
    ("""
     - hosts: all
       tasks:
         - template: {src: missing.j2, dest: /etc/x}
     """, 3, "plays[0].tasks[0].template.src", "template 'missing.j2' not found"),
    ("""
     - hosts: all
       tasks:
         - copy: {content: x, dest: relative/path}
     """, 3, "plays[0].tasks[0].copy.dest", "absolute path"),
    ("""
     - hosts: all
       tasks:
         - file:
             path: /etc/x
             mode: 0644
     """, 5, "plays[0].tasks[0].file.mode", "quoted octal string"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           when: "x =="
     """, 4, "plays[0].tasks[0].when", "template syntax error"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           when: "{{ x }}"
     """, 4, "plays[0].tasks[0].when", "without {{ }}"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           notify: restrat
       handlers:
         - name: restart
           command: [true]
     """, 4, "plays[0].tasks[0].notify", "did you mean 'restart'?"),
    ("""
     - hosts: all
       tasks:
         - shell: "rm -rf {{ deploy.root }}/old"
     """, 3, "plays[0].tasks[0].shell.cmd", "unquoted"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           register: hostvars
     """, 4, "plays[0].tasks[0].register", "reserved"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           register: "bad name"
     """, 4, "plays[0].tasks[0].register", "not a valid variable name"),
    ("""
     - hosts: all
       serial: 0
       tasks: []
     """, 2, "plays[0].serial", "serial must be"),
    ("""
     - hosts: all
       order: random
       tasks: []
     """, 2, "plays[0].order", "order must be one of"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           retries: -1
     """, 4, "plays[0].tasks[0].retries", "whole number"),
    ("""
     - hosts: all
       tasks:
         - systemd: {name: "x; reboot", state: started}
     """, 3, "plays[0].tasks[0].systemd.name", "not a unit name"),
    ("""
     - hosts: all
       tasks:
         - systemd: {name: x, state: runing}
     """, 3, "plays[0].tasks[0].systemd.state", "systemd:"),
    ("""
     - hosts: all
       tasks:
         - wait_for: {port: 80, url: "http://127.0.0.1/"}
     """, 3, "plays[0].tasks[0].wait_for", "exactly one of `port` or `url`"),
    ("""
     - hosts: all
       tasks:
         - command: "echo {% if x %}y{% endif %}"
     """, 3, "plays[0].tasks[0].command", "{% %} blocks"),
    ("""
     - hosts: all
       tasks:
         - command: [true]
           ignore_errors: yes please
     """, 4, "plays[0].tasks[0].ignore_errors", "true or false"),
    ("""
     hosts: all
     """, 1, None, "a playbook is a list of plays"),
    ("""
     - hosts: all
       tasks:
         - debug: {msg: "{{ unclosed"}
     """, 3, "plays[0].tasks[0].debug.msg", "template syntax error"),
    ("""
     - hosts: all
       tasks:
         - name: a
           command: [true]
         - name: a
           command: [true]
           name: b
     """, 7, "plays[0].tasks[1].name", "duplicate key 'name'"),
    ("""
     - hosts: all
       always: true
       rescue: true
       tasks: []
     """, 3, "plays[0].rescue", "not both"),
    ("""
     - hosts: all
       rescue: "after a failure"
       tasks: []
     """, 2, "plays[0].rescue", "true or false"),
    ("""
     - hosts: all
       rescue: true
       confirm: really?
       tasks: []
     """, 3, "plays[0].confirm", "cannot wait for an answer"),
    ("""
     - hosts: all
       resuce: true
     """, 2, "plays[0].resuce", "did you mean 'rescue'"),
]


@pytest.mark.parametrize("text,line,field,fragment", CASES,
                         ids=[f"case{i}" for i in range(len(CASES))])
def test_malformed_playbooks_fail_with_file_line_and_field(tmp_path, text, line, field,
                                                           fragment):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_playbook(path)
    err = info.value
    assert err.exit_code == Exit.USAGE
    assert err.file == str(path)
    assert err.line == line, str(err)
    if field is not None:
        assert err.field == field, str(err)
    assert fragment in str(err)
    assert "\n" not in str(err)


def test_a_valid_playbook_loads_with_positions_and_defaults(tmp_path):
    path = write(tmp_path, """
        - name: deploy
          hosts: nodes:!node3
          order: rank
          vars: {root: /srv}
          tasks:
            - name: render
              template: {src: ok.j2, dest: "{{ root }}/x", mode: "0640"}
              notify: [restart]
              tags: [render]
            - command: "ls -l {{ root }}"
              until: result.rc == 0
              changed_when: false
          handlers:
            - name: restart
              listen: [bounce]
              systemd: {name: x.service, state: restarted}
        """)
    book = load_playbook(path)
    play = book.plays[0]
    assert (play.name, play.hosts, play.order, play.batch_size(4)) == \
        ("deploy", "nodes:!node3", "rank", 1)
    render, listing = play.tasks
    assert render.where.line == 6 and render.notify == ("restart",)
    assert render.tags == frozenset({"render"})
    assert listing.name == "command ls -l {{ root }}"
    assert listing.args == {"argv": ["ls", "-l", "{{ root }}"]}
    assert listing.retries == 3 and listing.attempts == 4
    assert play.handlers[0].listen == ("bounce",)


def test_serial_batches_and_percentages(tmp_path):
    path = write(tmp_path, """
        - hosts: all
          serial: 2
          tasks: []
        - hosts: all
          serial: "50%"
          tasks: []
        """)
    first, second = load_playbook(path).plays
    assert first.order == "serial" and first.batch_size(5) == 2
    assert second.batch_size(4) == 2 and second.batch_size(1) == 1


def test_missing_file_and_yaml_syntax_errors(tmp_path):
    with pytest.raises(InputError, match="playbook not found"):
        load_playbook(tmp_path / "nope.yaml")
    path = write(tmp_path, "- hosts: all\n  tasks: [\n")
    with pytest.raises(InputError) as info:
        load_playbook(path)
    assert "YAML syntax error" in str(info.value) and info.value.line is not None
