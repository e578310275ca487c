"""The switch's append-only log: what later steps and the rescue read back, and what
`deploy --json` shows (`done`)."""

from __future__ import annotations

import json
import threading

import pytest

from ascendctl.deploy.nodestate import UnitState
from ascendctl.deploy.switchlog import Subjects, SwitchLog, started_record


def unit(pid: int, restarts: int = 0) -> UnitState:
    return UnitState(load="loaded", active="active", sub="running", main_pid=pid,
                     restarts=restarts)


def test_a_rescue_that_restarts_a_host_forgets_what_it_started_before():
    log = SwitchLog()
    log.add("restart", ["node0", "node1"])
    log.add("started", ["node0"], **started_record("ascendctl-engine.service", unit(101)))
    log.add("started", ["node1"], **started_record("ascendctl-engine.service", unit(202)))
    log.add("forgotten", ["node0"])
    assert log.started("node0") == {}
    log.add("started", ["node0"], **started_record("ascendctl-engine.service", unit(303, 1)))
    assert log.started("node0")["ascendctl-engine.service"].main_pid == 303
    assert log.started("node1")["ascendctl-engine.service"].main_pid == 202
    assert log.subjects("restart") == {"node0", "node1"}


def test_a_group_put_back_in_is_no_longer_out_and_the_last_install_counts():
    log = SwitchLog()
    log.add("out", ["g0", "g1"])
    log.add("in", ["g0"])
    assert log.out_of_balancer() == {"g1"}
    log.add("out", ["g0"])
    assert log.out_of_balancer() == {"g0", "g1"}
    log.add("units", ["node0"], files=["a.service"])
    log.add("units", ["node0"], files=[])
    assert log.changed_units("node0") == [] and log.changed_units("node1") == []
    log.add("committed", ["node0"], previous="r-old")
    log.add("committed", ["node1"], previous=None)
    assert log.committed() == {"node0": "r-old", "node1": None}


def test_the_log_reads_as_json_in_order_without_the_unit_objects():
    log = SwitchLog()
    log.add("stopped", ["node1", "node0"])
    log.add("started", ["node0"], **started_record("ascendctl-engine.service", unit(7, 2)))
    shown = json.loads(json.dumps(log.as_list()))
    assert [(d["kind"], d["subject"]) for d in shown] == \
        [("stopped", "node1"), ("stopped", "node0"), ("started", "node0")]
    assert shown[2]["unit"] == "ascendctl-engine.service"
    assert (shown[2]["pid"], shown[2]["restarts"]) == (7, 2) and "state" not in shown[2]
    assert shown[0]["t"] <= shown[2]["t"]


def test_an_unknown_record_is_refused_and_appends_from_threads_are_all_kept():
    log = SwitchLog()
    with pytest.raises(ValueError, match="unknown switch record 'restarted'"):
        log.add("restarted", ["node0"])

    def settle(index: int) -> None:
        for n in range(200):
            log.add("settled", [f"node{index}-{n}"])

    threads = [threading.Thread(target=settle, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(log.subjects("settled")) == 800 and len(log.records()) == 800


def test_the_runs_host_sets_are_read_only_views_of_the_log():
    class Run:
        restarting = Subjects("restart")

        def __init__(self) -> None:
            self.done = SwitchLog()

    run = Run()
    assert run.restarting == frozenset()
    run.done.add("restart", ["node1"])
    assert run.restarting == {"node1"}
    with pytest.raises(AttributeError):
        run.restarting.add("node0")      # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown switch record 'restarts'"):
        Subjects("restarts")
