"""`import_plays: FILE` in a playbook or a rolling block: the file's plays in place, looked
up next to the importing file first, then in the project's playbooks/; the import's `vars`
as defaults of each imported play's vars; every error names the file it is in, its line
and field."""

from __future__ import annotations

import textwrap

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.paths import playbooks_dir
from ascendctl.playbook import PlaybookRunner, RunOptions, load_playbook, templar_for
from ascendctl.playbook.model import Rolling
from tests.unit.test_playbook_rolling import Recorder, group_inventory


def write(path, *texts: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(textwrap.dedent(text).lstrip("\n") for text in texts))
    return path


def refused(path, file, line: int, field: str, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        load_playbook(path)
    err = info.value
    assert (err.exit_code, err.file, err.line, err.field) == (Exit.USAGE, str(file), line,
                                                              field), str(err)
    assert fragment in str(err) and "\n" not in str(err)


PLAY = """
    - name: {name}
      hosts: all
      tasks:
        - debug: {{msg: "{name}"}}
    """


def test_imported_plays_stand_in_place_with_the_import_vars_as_defaults(tmp_path):
    write(tmp_path / "inner.yaml", """
        - name: first
          hosts: all
          vars: {colour: red}
          tasks:
            - debug: {msg: "{{ colour }} {{ size }}"}
        - name: second
          hosts: head
          tasks:
            - debug: {msg: "{{ colour }}"}
        """)
    book = load_playbook(write(tmp_path / "play.yaml", """
        - name: before
          hosts: all
          tasks: []
        - import_plays: inner.yaml
          vars: {colour: blue, size: 3}
        - name: roll
          rolling: true
          plays:
            - import_plays: inner.yaml
            - name: own
              hosts: all
              tasks: []
        """))
    before, first, second, rolling = book.plays
    assert isinstance(rolling, Rolling)
    assert [p.name for p in book.all_plays()] == ["before", "first", "second", "first",
                                                  "second", "own"]
    assert first.vars == {"colour": "red", "size": 3}          # the play's own vars win
    assert second.vars == {"colour": "blue", "size": 3}
    assert rolling.plays[0].vars == {"colour": "red"} and rolling.plays[1].vars == {}
    inner = str((tmp_path / "inner.yaml").resolve())
    assert (first.where.file, first.where.line, first.where.field) == (inner, 1, "plays[0]")
    assert (second.tasks[0].where.file, second.tasks[0].where.line) == (inner, 9)
    assert before.where.file == str(tmp_path / "play.yaml")


def test_the_import_vars_reach_the_tasks_at_run_time(tmp_path):
    write(tmp_path / "inner.yaml", """
        - name: gate
          hosts: head
          vars: {own: mine}
          tasks:
            - name: say
              debug: {msg: "{{ flag | default(true) }} {{ own }}"}
              register: said
            - name: native
              assert: {that: "said.msg == 'False mine' and flag is sameas false"}
        """)
    path = write(tmp_path / "play.yaml", """
        - name: roll
          rolling: true
          plays:
            - import_plays: inner.yaml
              vars: {flag: false, own: theirs}
        """)
    recorder = Recorder()
    report = PlaybookRunner(load_playbook(path), group_inventory(tmp_path, groups=1),
                            RunOptions(), recorder, templar_for(path)).run()
    assert report.exit_code() == 0, recorder.tasks
    assert [name for name, _ in recorder.tasks] == ["say", "native"]


def test_a_file_next_to_the_playbook_wins_over_the_shipped_one(tmp_path):
    # an operator's copy of a shipped playbook elsewhere still finds the shipped switch
    book = load_playbook(write(tmp_path / "ops" / "my-deploy.yaml", """
        - name: what the switch needs before it (the lock, the release on the nodes)
          hosts: all
          tasks:
            - deploy_lock: {state: acquired}
              run_once: true
            - release_facts: {}
              run_once: true
            - release_stage: {}
        - name: roll
          rolling: true
          plays:
            - import_plays: switch.yaml
        """))
    shipped = str((playbooks_dir() / "switch.yaml").resolve())
    assert {p.where.file for p in book.plays[-1].plays} == {shipped}
    # ... and its own edited copy next to it, once there
    write(tmp_path / "ops" / "switch.yaml", PLAY.format(name="my switch"))
    book = load_playbook(tmp_path / "ops" / "my-deploy.yaml")
    assert [(p.name, p.where.file) for p in book.plays[-1].plays] == \
        [("my switch", str((tmp_path / "ops" / "switch.yaml").resolve()))]


def test_a_nested_import_resolves_next_to_the_file_that_imports_it(tmp_path):
    write(tmp_path / "lib" / "outer.yaml", """
        - import_plays: leaf.yaml
          vars: {depth: outer}
        """)
    write(tmp_path / "lib" / "leaf.yaml", PLAY.format(name="leaf"))
    write(tmp_path / "leaf.yaml", PLAY.format(name="the wrong leaf"))
    book = load_playbook(write(tmp_path / "play.yaml", "- import_plays: lib/outer.yaml\n"))
    (leaf,) = book.plays
    assert (leaf.name, leaf.vars) == ("leaf", {"depth": "outer"})


def test_errors_inside_an_imported_file_name_that_file(tmp_path):
    inner = write(tmp_path / "inner.yaml", PLAY.format(name="fine"), """
        - name: typo
          hosts: all
          taks: []
        """)
    path = write(tmp_path / "play.yaml", "- import_plays: inner.yaml\n")
    refused(path, inner.resolve(), 7, "plays[1].taks",
            "unknown play key 'taks'; did you mean 'tasks'?")
    write(inner, """
        - hosts: all
          tasks:
            - balancer: {state: sideways}
        """)
    refused(path, inner.resolve(), 3, "plays[0].tasks[0].balancer.state", "balancer:")
    write(inner, "- hosts: all\n  tasks: [\n")
    with pytest.raises(InputError) as info:
        load_playbook(path)
    assert info.value.file == str(inner.resolve()) and "YAML syntax error" in str(info.value)
    write(inner, "hosts: all\n")
    refused(path, inner.resolve(), 1, None, "an imported file is a list of plays")


@pytest.mark.parametrize("item,line,field,fragment", [
    ("- import_plays: nowhere.yaml\n", 5, "plays[1].import_plays",
     "import_plays: 'nowhere.yaml' not found (looked next to play.yaml and in "),
    ("- import_plays: inner.yaml\n  var: {a: 1}\n", 6, "plays[1].var",
     "unknown key of an import 'var'; did you mean 'vars'?"),
    ("- import_playbook: inner.yaml\n", 5, "plays[1].import_playbook",
     "unknown play key 'import_playbook'; did you mean 'import_plays'?"),
    ("- import_plays: inner.yaml\n  vars: [a]\n", 6, "plays[1].vars", "expected a mapping"),
    ("- import_plays: inner.yaml\n  vars: {hostvars: 1}\n", 6, "plays[1].vars.hostvars",
     "'hostvars' is reserved"),
    ("- import_plays: inner.yaml\n  vars: {a: '{{ b'}\n", 6, "plays[1].vars.a",
     "template syntax error"),
    ("- import_plays: '{{ which }}.yaml'\n", 5, "plays[1].import_plays",
     "import_plays names a file as written"),
    ("- import_plays: [inner.yaml]\n", 5, "plays[1].import_plays", "expected text"),
])
def test_a_bad_import_is_refused_at_the_import(tmp_path, item, line, field, fragment):
    write(tmp_path / "inner.yaml", PLAY.format(name="inner"))
    path = write(tmp_path / "play.yaml", PLAY.format(name="first"), item)
    refused(path, path, line, field, fragment)


def test_import_cycles_are_refused_where_they_close(tmp_path):
    write(tmp_path / "a.yaml", "- import_plays: b.yaml\n")
    b = write(tmp_path / "b.yaml", PLAY.format(name="b"), "- import_plays: a.yaml\n")
    refused(tmp_path / "a.yaml", b.resolve(), 5, "plays[1].import_plays",
            "import cycle: a.yaml -> b.yaml -> a.yaml")
    itself = write(tmp_path / "self.yaml", "- import_plays: self.yaml\n")
    refused(itself, itself, 1, "plays[0].import_plays", "import cycle: self.yaml -> self.yaml")


def test_imports_nest_at_most_four_deep(tmp_path):
    for depth in range(1, 6):
        write(tmp_path / f"i{depth}.yaml", f"- import_plays: i{depth + 1}.yaml\n")
    write(tmp_path / "i5.yaml", PLAY.format(name="five deep"))
    refused(write(tmp_path / "play.yaml", "- import_plays: i1.yaml\n"),
            (tmp_path / "i4.yaml").resolve(), 1, "plays[0].import_plays",
            "imports nest at most 4 deep")
    (play,) = load_playbook(write(tmp_path / "play.yaml", "- import_plays: i2.yaml\n")).plays
    assert play.name == "five deep"


def test_a_rolling_block_imported_into_a_rolling_block_is_refused(tmp_path):
    inner = write(tmp_path / "inner.yaml", PLAY.format(name="fine"), """
        - name: nested
          rolling: true
          plays:
            - {hosts: all, tasks: []}
        """)
    path = write(tmp_path / "play.yaml", """
        - name: roll
          rolling: true
          plays:
            - import_plays: inner.yaml
        """)
    refused(path, inner.resolve(), 6, "plays[1].rolling",
            f"rolling blocks do not nest (this file is imported into the rolling block at "
            f"{path}:1)")
    # imported at the top level, its rolling block is a block of its own
    book = load_playbook(write(tmp_path / "top.yaml", "- import_plays: inner.yaml\n"))
    assert [type(item).__name__ for item in book.plays] == ["Play", "Rolling"]


def test_an_imported_file_without_plays_is_refused(tmp_path):
    path = write(tmp_path / "play.yaml", "- import_plays: inner.yaml\n")
    for text, fragment in (("", "the imported file is empty"),
                           ("[]\n", "the imported file has no plays")):
        inner = write(tmp_path / "inner.yaml", text)
        with pytest.raises(InputError) as info:
            load_playbook(path)
        assert info.value.file == str(inner.resolve()) and fragment in str(info.value)
