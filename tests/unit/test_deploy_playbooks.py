"""The packaged deploy and rollback playbooks show every step as a task of its own, end
with a rescue and an always play, and stop the whole switch on any node's failure."""

from __future__ import annotations

import pytest

from ascendctl.paths import playbooks_dir
from ascendctl.playbook import load_playbook

DEPLOY_STEPS = [
    ("take the cluster-wide deploy lock", ["deploy_lock"]),
    ("preflight gate", ["preflight_gather", "preflight_pings", "preflight_checks"]),
    ("stage the release on every node", ["release_facts", "release_stage"]),
    ("weights", ["weights_push", "release_model"]),
    ("make the engine present on every node", ["engine_present"]),
    ("hold the gang supervisor", ["supervisor_hold"]),
    ("stop the old engines", ["engine_stop"]),
    ("install the release's units", ["release_units"]),
    ("start the head", ["engine_start"]),
    ("start the followers in rank order", ["engine_start"]),
    ("readiness gate", ["engine_ready"]),
    ("warm-up", ["engine_warmup", "node_services"]),
    ("commit", ["release_commit", "supervisor_hold", "release_prune"]),
    ("restore the previous release", ["release_restore"]),
    ("give back the lock", ["supervisor_hold", "deploy_lock"]),
]


def test_deploy_yaml_lists_every_step():
    book = load_playbook(playbooks_dir() / "deploy.yaml")
    assert [(p.name, [t.module for t in p.tasks]) for p in book.plays] == DEPLOY_STEPS
    by_name = {p.name: p for p in book.plays}
    assert (by_name["start the head"].hosts, by_name["start the followers in rank order"]
            .hosts, by_name["start the followers in rank order"].order) == \
        ("head", "followers", "rank")
    assert [p.name for p in book.plays if p.rescue] == ["restore the previous release"]
    assert [p.name for p in book.plays if p.always] == ["give back the lock"]


@pytest.mark.parametrize("name", ["deploy.yaml", "rollback.yaml"])
def test_every_step_play_stops_the_whole_switch_on_a_failure(name):
    book = load_playbook(playbooks_dir() / name)
    steps = [p for p in book.plays if not (p.rescue or p.always)]
    assert all(p.any_errors_fatal for p in steps), [p.name for p in steps
                                                    if not p.any_errors_fatal]
    assert book.plays[-2].rescue and book.plays[-1].always
    modules = [t.module for p in book.plays for t in p.tasks]
    assert modules.index("engine_present") < modules.index("supervisor_hold") \
        < modules.index("engine_stop") < modules.index("release_units") \
        < modules.index("engine_start") < modules.index("engine_ready") \
        < modules.index("engine_warmup") < modules.index("release_commit")
