"""A playbook whose tasks break the order the deploy's steps hand state to each other is
refused when it is loaded, naming the task's file, line and field, what it needs and which
module provides it; the shipped playbooks, and an operator's copy with steps of their own
inserted where docs/deploy.md shows, load."""

from __future__ import annotations

import shutil

import pytest

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.paths import playbooks_dir
from ascendctl.playbook import load_playbook
from ascendctl.playbook.modules import load_modules


def copies(tmp_path):
    """deploy.yaml and switch.yaml copied side by side (the copy imports its own switch)."""
    for name in ("deploy.yaml", "switch.yaml", "rollback.yaml"):
        shutil.copy(playbooks_dir() / name, tmp_path / name)
    return tmp_path


def line_of(path, text: str) -> int:
    """The 1-based line of the only occurrence of TEXT in PATH (read, not computed)."""
    lines = path.read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def refused(path, file, line: int, fragment: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_playbook(path)
    err = info.value
    assert (err.exit_code, err.file, err.line) == (Exit.USAGE, str(file), line), str(err)
    assert fragment in str(err), str(err)
    return err


def move_play(path, name: str, before: str) -> None:
    """Cut the play headed `- name: NAME` and paste it before the play `- name: BEFORE`."""
    text = path.read_text()
    blocks = text.split("\n- name: ")
    head, plays = blocks[0], blocks[1:]
    moved = next(p for p in plays if p.startswith(name + "\n"))
    plays.remove(moved)
    at = next(i for i, p in enumerate(plays) if p.startswith(before + "\n"))
    plays.insert(at, moved)
    path.write_text("\n- name: ".join([head, *plays]))


def test_every_need_of_a_module_has_a_module_that_provides_it():
    modules = load_modules()
    provided = {item for cls in modules.values() for item in cls.provides}
    needed = {(name, item) for name, cls in modules.items() for item in cls.needs}
    assert needed, "the deploy steps declare what they need"
    assert {(name, item) for name, item in needed if item not in provided} == set()


@pytest.mark.parametrize("name", ["deploy.yaml", "rollback.yaml"])
def test_the_shipped_playbooks_and_copies_with_an_operators_steps_load(tmp_path, name):
    load_playbook(playbooks_dir() / name)
    work = copies(tmp_path)
    switch = work / "switch.yaml"
    # the two insertions docs/deploy.md shows: before the head's start, after readiness
    text = switch.read_text()
    text = text.replace("\n- name: start the head\n", """
- name: drop the page cache before the start
  hosts: all
  tasks:
    - command: [sh, -c, "sync; echo 3 > /proc/sys/vm/drop_caches"]
      when: release.restart

- name: start the head
""")
    text = text.replace("\n- name: warm-up\n", """
- name: my own probe after readiness
  hosts: head
  tasks:
    - command: [curl, -sf, "http://127.0.0.1:{{ serving.port }}/metrics"]

- name: warm-up
""")
    switch.write_text(text)
    book = load_playbook(work / name)
    assert "my own probe after readiness" in [p.name for p in book.all_plays()]


def test_starting_the_engines_before_their_units_are_installed_is_refused(tmp_path):
    work = copies(tmp_path)
    move_play(work / "switch.yaml", "install the release's units", before="readiness gate")
    line = line_of(work / "switch.yaml", "- name: start rank 0 and wait until it is up")
    err = refused(work / "deploy.yaml", (work / "switch.yaml").resolve(), line,
                  "engine_start needs `units_installed` (provided by release_units)")
    assert err.field and err.field.endswith("tasks[0]")


def test_a_deploy_without_the_lock_is_refused_at_its_first_step_that_needs_it(tmp_path):
    work = copies(tmp_path)
    move_play(work / "deploy.yaml", "take the cluster-wide deploy lock",
              before="switch the serving groups")
    line = line_of(work / "deploy.yaml", "- name: read releases, units and history")
    refused(work / "deploy.yaml", work / "deploy.yaml", line,
            "release_facts needs `deploy_lock` (provided by deploy_lock)")


def test_a_rollback_that_names_no_release_does_not_put_one_on_the_nodes(tmp_path):
    work = copies(tmp_path)
    rollback = work / "rollback.yaml"
    rollback.write_text(rollback.read_text().replace(
        "release_facts: {release: \"{{ rollback_to | default('previous') }}\"}",
        "release_facts: {}"))
    line = line_of(work / "switch.yaml", "- name: relay and load the image archive")
    refused(rollback, (work / "switch.yaml").resolve(), line,
            "engine_present needs `release_on_nodes` (provided by release_facts, release_stage)")


@pytest.mark.parametrize("old,new,at,fragment,why", [
    # a rescue play may run before any play of its rolling block did
    ("      release_restore: {}\n      run_once: true\n",
     "      release_restore: {}\n      run_once: true\n"
     "    - name: a warm-up after the restore\n      engine_warmup: {}\n",
     "- name: a warm-up after the restore",
     "engine_warmup needs `engines_ready` (provided by engine_ready)",
     "a rescue play may run right after the first play of its sequence failed"),
    # a task under `when:` may not run
    ("      release_units: {}\n", "      release_units: {}\n      when: release.restart\n",
     "- name: start rank 0 and wait until it is up",
     "engine_start needs `units_installed`", "only under `when:`"),
], ids=["rescue", "when"])
def test_what_may_not_have_run_does_not_count(tmp_path, old, new, at, fragment, why):
    work = copies(tmp_path)
    switch = work / "switch.yaml"
    text = switch.read_text()
    assert old in text
    switch.write_text(text.replace(old, new))
    err = refused(work / "deploy.yaml", switch.resolve(), line_of(switch, at), fragment)
    assert why in str(err)
