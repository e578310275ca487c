"""`rolling:` blocks: plays repeated once per batch of serving groups, each batch's plays
on the batch's hosts only, a batch's rescue and always plays, and a failed batch ending
the rollout. Controller modules only: no host needs to be reachable."""

from __future__ import annotations

import textwrap

import pytest

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.playbook import PlaybookRunner, RunOptions, load_playbook, templar_for
from ascendctl.playbook.reporting import Reporter
from ascendctl.playbook.state import RunState


def group_inventory(tmp_path, groups: int = 3, per_group: int = 2, extra_vars: str = ""):
    """GROUPS serving groups g0, g1, ... of PER_GROUP nodes each (ranks within a group)."""
    lines = []
    for g in range(groups):
        lines.append(f"        g{g}:\n          vars: {{serving_group: true}}\n          hosts:")
        for r in range(per_group):
            i = g * per_group + r
            lines.append(f"            n{i}: {{ansible_host: 198.18.250.{10 + i}, rank: {r}}}")
    text = textwrap.dedent(f"""
        all:
          vars:
            cluster: {{name: t, npus_per_node: 1}}
            model: {{path: /srv/m}}
            serving: {{mode: mp, pipeline_parallel_size: {per_group}, proxy: {{enabled: true}}}}
            ssh: {{connect_timeout: 2, connect_retries: 0, known_hosts: {tmp_path}/kh}}
            {extra_vars}
          children:
            nodes:
              children:
        """).lstrip("\n") + "\n".join(lines) + "\n"
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path)


class Recorder(Reporter):
    def __init__(self):
        self.plays: list[tuple[str, list[str]]] = []
        self.notes: list[str] = []
        self.tasks: list[tuple[str, dict[str, str]]] = []

    def play_start(self, play, report):
        self.plays.append((play.name, list(report.hosts)))

    def task_end(self, task, report):
        self.tasks.append((task.name, {h: str(r.status) for h, r in report.results.items()}))

    def note(self, text):
        self.notes.append(text)


def run(tmp_path, playbook: str, inventory=None, **options):
    path = tmp_path / "play.yaml"
    path.write_text(textwrap.dedent(playbook).lstrip("\n"))
    inv = inventory or group_inventory(tmp_path)
    recorder = Recorder()
    state = RunState()
    runner = PlaybookRunner(load_playbook(path), inv, RunOptions(**options), recorder,
                            templar_for(path), run_state=state)
    report = runner.run()
    return report, recorder, runner


ROLLOUT = """
    - name: before
      hosts: all
      tasks:
        - debug: {msg: start}
          run_once: true
    - name: roll
      rolling: {max_unavailable: MAX}
      plays:
        - name: switch
          hosts: all
          tasks:
            - name: the batch
              debug: {msg: "{{ rolling.groups | join(',') }} {{ rolling.batch }}/{{ rolling.batches }}"}
            - name: break g1
              fail: {msg: "g1 is broken"}
              when: "'g1' in rolling.groups and inventory_hostname == 'n2'"
        - name: heads only
          hosts: head
          tasks:
            - debug: {msg: head}
        - name: undo
          hosts: all
          rescue: true
          tasks:
            - name: undo it
              debug: {msg: "undo {{ failed_task.host }}"}
              run_once: true
        - name: cleanup
          hosts: all
          always: true
          tasks:
            - name: clean
              debug: {msg: clean}
              run_once: true
    - name: after
      hosts: all
      tasks:
        - debug: {msg: after}
    - name: outer rescue
      hosts: all
      rescue: true
      tasks:
        - name: outer undo
          debug: {msg: outer}
    - name: the end
      hosts: head
      always: true
      tasks:
        - name: unlock
          debug: {msg: bye}
          run_once: true
    """


def test_batches_run_in_group_order_on_their_own_hosts_and_a_failure_ends_the_rollout(
        tmp_path):
    report, rec, _ = run(tmp_path, ROLLOUT.replace("MAX", "1"))
    names = [name for name, _ in rec.plays]
    assert names == [
        "before",
        "switch [g0]", "heads only [g0]", "cleanup [g0]",
        "switch [g1]", "undo [g1]", "cleanup [g1]",
        "the end"]
    hosts = dict(rec.plays)
    assert hosts["switch [g0]"] == ["n0", "n1"] and hosts["heads only [g0]"] == ["n0"]
    assert hosts["switch [g1]"] == ["n2", "n3"]
    # the rescue of g1 ran on g1's hosts, then its always play; g2 never started, the
    # plays after the block were skipped and the outer rescue did not run again
    assert ("undo it", {"n2": "ok", "n3": "ok"}) in rec.tasks
    assert not any(name.endswith("[g2]") for name in names)
    assert "outer undo" not in [t for t, _ in rec.tasks]
    assert any(n.startswith("ROLLING [roll] batch 1/3: g0 (then g1, g2)") for n in rec.notes)
    assert "batch 2/3 (g1) failed; the rollout stops" in report.aborted
    assert int(report.exit_code()) == 1


def test_max_unavailable_batches_groups_and_may_come_from_a_template(tmp_path):
    inv = group_inventory(tmp_path, groups=3,
                          extra_vars="deploy: {rolling: {max_unavailable: 2}}")
    book = ROLLOUT.replace("MAX", '"{{ deploy.rolling.max_unavailable }}"').replace(
        "'g1' in rolling.groups", "false")
    report, rec, _ = run(tmp_path, book, inventory=inv)
    names = [name for name, _ in rec.plays]
    assert names == ["before", "switch [g0, g1]", "heads only [g0, g1]", "cleanup [g0, g1]",
                     "switch [g2]", "heads only [g2]", "cleanup [g2]", "after", "the end"]
    assert dict(rec.plays)["heads only [g0, g1]"] == ["n0", "n2"]
    msgs = [t for t in rec.tasks if t[0] == "the batch"]
    assert [sorted(hosts) for _, hosts in msgs] == [["n0", "n1", "n2", "n3"], ["n4", "n5"]]
    assert int(report.exit_code()) == 0 and not report.aborted


def test_a_failure_outside_the_rollout_skips_it_and_runs_the_outer_rescue(tmp_path):
    book = ROLLOUT.replace("MAX", "1").replace("- debug: {msg: start}",
                                               "- fail: {msg: before failed}").replace(
        "      hosts: all\n      tasks:\n        - fail",
        "      hosts: all\n      any_errors_fatal: true\n      tasks:\n        - fail")
    report, rec, _ = run(tmp_path, book)
    names = [name for name, _ in rec.plays]
    assert names == ["before", "outer rescue", "the end"]


def test_limit_rolls_only_the_groups_it_touches(tmp_path):
    book = ROLLOUT.replace("MAX", "1").replace("'g1' in rolling.groups", "false")
    report, rec, _ = run(tmp_path, book, limit="g2")
    assert [n for n, _ in rec.plays if "[" in n] == ["switch [g2]", "heads only [g2]",
                                                     "cleanup [g2]"]
    assert any("batch 1/1: g2" in n for n in rec.notes)


def test_one_group_inventory_runs_the_block_once_under_its_own_names(tmp_path):
    path = tmp_path / "one.yaml"
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
                n0: {{ansible_host: 198.18.250.10, rank: 0}}
                n1: {{ansible_host: 198.18.250.11, rank: 1}}
        """).lstrip("\n"))
    inv = load_inventory(path)
    book = ROLLOUT.replace("MAX", "1").replace("'g1' in rolling.groups", "false")
    report, rec, _ = run(tmp_path, book, inventory=inv)
    assert [n for n, _ in rec.plays] == ["before", "switch", "heads only", "cleanup", "after",
                                         "the end"]
    assert ("the batch", {"n0": "ok", "n1": "ok"}) in rec.tasks


def test_the_rollout_order_is_listed_without_contacting_anything(tmp_path):
    path = tmp_path / "play.yaml"
    path.write_text(textwrap.dedent(ROLLOUT.replace("MAX", "2")).lstrip("\n"))
    runner = PlaybookRunner(load_playbook(path), group_inventory(tmp_path), RunOptions(),
                            Reporter(), templar_for(path))
    planned = [(play.name, [h.name for h in hosts]) for play, hosts in runner.plan()]
    assert planned[1:4] == [("switch [g0, g1]", ["n0", "n1", "n2", "n3"]),
                            ("heads only [g0, g1]", ["n0", "n2"]),
                            ("undo [g0, g1]", ["n0", "n1", "n2", "n3"])]
    assert planned[5][0] == "switch [g2]"


@pytest.mark.parametrize("block,message", [
    ({"rolling": {"max_unavailable": 0}, "plays": [{"hosts": "all", "tasks": []}]},
     "expected a whole number between 1 and 100000"),
    ({"rolling": {"max_unavailible": 1}, "plays": [{"hosts": "all", "tasks": []}]},
     "unknown rolling option 'max_unavailible'; did you mean 'max_unavailable'?"),
    ({"rolling": {}, "plays": [{"hosts": "all", "rescue": True, "tasks": []}]},
     "a rolling block needs at least one play that is neither rescue nor always"),
    ({"rolling": {}}, "a rolling block needs `plays:`"),
    ({"rolling": {}, "plays": [{"rolling": {}, "plays": []}]}, "rolling blocks do not nest"),
    ({"rolling": {}, "hosts": "all", "tasks": [], "plays": []}, "unknown key of a rolling block "
     "'tasks'"),
    ({"rolling": {"max_unavailable": "two"}, "plays": [{"hosts": "all", "tasks": []}]},
     "max_unavailable must be a number of serving groups"),
])
def test_the_loader_refuses_bad_rolling_blocks_with_file_and_line(tmp_path, block, message):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump([{"name": "lock", "hosts": "all", "tasks": []},
                                    {"name": "roll", **block}], sort_keys=False))
    with pytest.raises(InputError) as err:
        load_playbook(path)
    assert message in str(err.value)
    assert str(err.value).startswith(f"{path}:")


def test_a_template_that_gives_no_number_is_refused_before_any_host(tmp_path):
    book = ROLLOUT.replace("MAX", '"{{ cluster.name }}"')
    with pytest.raises(InputError, match="max_unavailable must be a number of serving groups "
                       ">= 1, got 't'"):
        run(tmp_path, book)
