"""The packaged deploy and rollback playbooks show every step as a task of its own, switch
the serving groups in a `rolling:` block (its own rescue and always plays, written once in
switch.yaml and imported by both), end with an always play, and stop a group's switch on
any node's failure."""

from __future__ import annotations

import pytest

from ascendctl.paths import playbooks_dir
from ascendctl.playbook import load_playbook
from ascendctl.playbook.model import Rolling
from ascendctl.playbook.modules import MODULES, load_modules
from ascendctl.playbook.templating import Templar

BEFORE_THE_SWITCH = [
    ("take the cluster-wide deploy lock", ["deploy_lock"]),
    ("preflight gate", ["preflight_gather", "preflight_pings", "preflight_checks"]),
    ("stage the release on every node", ["release_facts", "release_stage"]),
    ("weights", ["weights_push", "release_model"]),
    ("the proxy on the gateway", ["proxy_site"]),
    ("quality reference", ["quality_baseline"]),
]
PER_GROUP = [
    ("make sure the release's engine is on the group's nodes", ["engine_present"]),
    ("take the group out of the balancer", ["balancer"]),
    ("hold the gang supervisor", ["supervisor_hold"]),
    ("stop the old engines", ["engine_stop"]),
    ("install the release's units", ["release_units"]),
    ("start the head", ["engine_start"]),
    ("start the followers in rank order", ["engine_start"]),
    ("readiness gate", ["engine_ready"]),
    ("warm-up", ["engine_warmup", "node_services"]),
    ("commit", ["release_commit"]),
    ("quality gate", ["quality_gate", "bench_gate", "promotion_gate"]),
    ("back into service", ["balancer", "supervisor_hold", "release_prune"]),
    ("restore the release the group served before", ["release_restore"]),
    ("the group back in service", ["balancer", "supervisor_hold"]),
]


def steps(plays):
    return [(p.name, [t.module for t in p.tasks]) for p in plays]


def test_deploy_yaml_lists_every_step():
    book = load_playbook(playbooks_dir() / "deploy.yaml")
    *before, rolling, last = book.plays
    assert steps(before) == BEFORE_THE_SWITCH
    assert isinstance(rolling, Rolling) and rolling.name == "switch the serving groups"
    assert rolling.max_unavailable == "{{ deploy.rolling.max_unavailable }}"
    assert steps(rolling.plays) == PER_GROUP
    assert steps([last]) == [("give back the lock", ["supervisor_hold", "deploy_lock"])]
    by_name = {p.name: p for p in rolling.plays}
    assert (by_name["start the head"].hosts, by_name["start the followers in rank order"]
            .hosts, by_name["start the followers in rank order"].order) == \
        ("head", "followers", "rank")
    assert [p.name for p in rolling.plays if p.rescue] == \
        ["restore the release the group served before"]
    assert [p.name for p in rolling.plays if p.always] == ["the group back in service"]
    assert last.always and not any(p.rescue for p in before)


@pytest.mark.parametrize("name", ["deploy.yaml", "rollback.yaml"])
def test_every_step_play_stops_the_group_switch_on_a_failure(name):
    book = load_playbook(playbooks_dir() / name)
    plays = book.all_plays()
    steps_ = [p for p in plays if not (p.rescue or p.always)]
    assert all(p.any_errors_fatal for p in steps_), [p.name for p in steps_
                                                     if not p.any_errors_fatal]
    rolling = next(p for p in book.plays if isinstance(p, Rolling))
    assert rolling.plays[-2].rescue and rolling.plays[-1].always and book.plays[-1].always
    modules = [t.module for p in plays for t in p.tasks]
    # the engine is present on a group's nodes before the group leaves the balancer
    assert modules.index("proxy_site") < modules.index("engine_present") \
        < modules.index("balancer") < modules.index("supervisor_hold") < modules.index("engine_stop") \
        < modules.index("release_units") \
        < modules.index("engine_start") < modules.index("engine_ready") \
        < modules.index("engine_warmup") < modules.index("release_commit") \
        < modules.index("quality_gate")
    # the group is back in the balancer only after its gates
    back = [t.module for t in rolling.plays[-3].tasks]
    assert back[0] == "balancer" and rolling.plays[-3].tasks[0].args == {"state": "in"}


def rendered_args(play, task) -> dict:
    """A task's arguments as the run gives them to its module: rendered with the play's
    vars (the import's among them), then the module's defaults filled in."""
    load_modules(plugins=False)
    templar = Templar([])
    args = templar.render(task.args, templar.render(play.vars, {}))
    return MODULES[task.module].Args.model_validate(args).model_dump()


def test_rollback_does_not_ask_agreement_of_an_older_release():
    book = load_playbook(playbooks_dir() / "rollback.yaml")
    ((play, gate),) = [(p, t) for p in book.all_plays() for t in p.tasks
                       if t.module == "quality_gate"]
    assert rendered_args(play, gate) == {"agreement": False}
    ((play, promotion),) = [(p, t) for p in book.all_plays() for t in p.tasks
                            if t.module == "promotion_gate"]
    assert rendered_args(play, promotion) == {"promote": False}
    assert "quality_baseline" not in [t.module for p in book.all_plays() for t in p.tasks]


# The switch as deploy.yaml and rollback.yaml each wrote it before switch.yaml (commit
# 5d2248d), play by play: (name, hosts, order, tags, flags, [(module, args after defaults,
# run_once, ignore_errors)]); flags: F any_errors_fatal, R rescue, A always, C confirm.
def switch_before(agreement: bool, engine: str, restore: str) -> list:
    return [
        (engine, "all", "parallel", ["engine"], "F", [("engine_present", {}, True, False)]),
        ("take the group out of the balancer", "all", "parallel", [], "FC",
         [("balancer", {"state": "out"}, True, False)]),
        ("hold the gang supervisor", "all", "parallel", [], "F",
         [("supervisor_hold", {"state": "held"}, True, False)]),
        ("stop the old engines", "all", "parallel", [], "F", [("engine_stop", {}, True, False)]),
        ("install the release's units", "all", "parallel", [], "F",
         [("release_units", {}, False, False)]),
        ("start the head", "head", "parallel", [], "F", [("engine_start", {}, False, False)]),
        ("start the followers in rank order", "followers", "rank", [], "F",
         [("engine_start", {}, False, False)]),
        ("readiness gate", "all", "parallel", [], "F", [("engine_ready", {}, True, False)]),
        ("warm-up", "all", "parallel", [], "F",
         [("engine_warmup", {}, True, False), ("node_services", {}, False, False)]),
        ("commit", "all", "parallel", [], "F", [("release_commit", {}, False, False)]),
        ("quality gate", "all", "parallel", [], "F",
         [("quality_gate", {"agreement": agreement}, True, False),
          ("bench_gate", {}, True, False),
          ("promotion_gate", {"promote": agreement}, True, False)]),
        ("back into service", "all", "parallel", [], "F",
         [("balancer", {"state": "in"}, True, False),
          ("supervisor_hold", {"state": "released"}, True, False),
          ("release_prune", {}, False, True)]),
        (restore, "all", "parallel", [], "R", [("release_restore", {}, True, False)]),
        ("the group back in service", "all", "parallel", [], "A",
         [("balancer", {"state": "in"}, True, False),
          ("supervisor_hold", {"state": "released"}, True, False)]),
    ]


# The intended wording changes: one name for both playbooks.
RENAMED = {
    "make the engine present on the group's nodes":
        "make sure the release's engine is on the group's nodes",
    "the chosen release's engine is present on the group's nodes":
        "make sure the release's engine is on the group's nodes",
    "restore the group's previous release": "restore the release the group served before",
    "restore the release that served before": "restore the release the group served before",
}
BEFORE = {
    "deploy.yaml": switch_before(True, "make the engine present on the group's nodes",
                                 "restore the group's previous release"),
    "rollback.yaml": switch_before(
        False, "the chosen release's engine is present on the group's nodes",
        "restore the release that served before"),
}


@pytest.mark.parametrize("name,block", [("deploy.yaml", "switch the serving groups"),
                                        ("rollback.yaml", "switch the serving groups back")])
def test_the_imported_switch_runs_what_each_playbook_wrote_before(name, block):
    book = load_playbook(playbooks_dir() / name)
    (rolling,) = [item for item in book.plays if isinstance(item, Rolling)]
    assert (rolling.name, rolling.max_unavailable) == \
        (block, "{{ deploy.rolling.max_unavailable }}")
    flat = [(p.name, p.hosts, p.order, sorted(p.tags),
             "".join(f for f, on in (("F", p.any_errors_fatal), ("R", p.rescue),
                                     ("A", p.always), ("C", p.confirm is not None)) if on),
             [(t.module, rendered_args(p, t), t.run_once, t.ignore_errors) for t in p.tasks])
            for p in rolling.plays]
    assert flat == [(RENAMED.get(play[0], play[0]), *play[1:]) for play in BEFORE[name]]
    # the switch's plays are written once, in switch.yaml
    assert {p.where.file for p in rolling.plays} == \
        {str((playbooks_dir() / "switch.yaml").resolve())}
