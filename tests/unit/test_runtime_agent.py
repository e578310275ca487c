"""The node agent acts only on a valid, signed, current plan, at most once per generation;
and the engine-state words it publishes come from systemd's view plus its memory."""

from __future__ import annotations

import json

import pytest

from ascendctl_runtime import engine_state as es
from ascendctl_runtime import gangplan
from ascendctl_runtime.agent import Agent, AgentConfig
from tests.unit.health_sim import TOKEN, UNIT, Clock, FakeSystemd


def make_agent(tmp_path, documents, *, release="r-1", token=TOKEN, boot="b1"):
    clock = Clock()
    systemd = FakeSystemd(clock, [UNIT])
    systemd.run("start", UNIT)
    feed = iter(documents)
    config = AgentConfig(cluster="c", node="node1", rank=1, release=release,
                         root=str(tmp_path), units=[UNIT], plan_url="-")
    agent = Agent(config, systemd=systemd, npu_table=lambda: ([], ""),
                  plan_source=lambda: next(feed, None), clock=clock, boot=lambda: boot,
                  token=token, sleep=clock.advance)
    return agent, systemd


def plan(generation=2, action="stop", release="r-1", cluster="c", upto=-1):
    return gangplan.Plan(cluster=cluster, release=release, generation=generation,
                         action=action, steps=(("node0", UNIT), ("node1", UNIT)),
                         start_upto=upto)


def signed(p, token=TOKEN):
    return gangplan.sign(p, token)


def stops(systemd):
    return [c for c in systemd.calls if c[0] == "stop"]


def test_a_signed_stop_plan_is_done_once(tmp_path):
    agent, systemd = make_agent(tmp_path, [signed(plan())] * 3)
    for _ in range(3):
        agent.step()
    assert len(stops(systemd)) == 1
    assert systemd.units[UNIT].active == "inactive"
    state = agent.snapshot()
    assert state["stopped_for"] == 2
    assert state["units"][UNIT]["state"] == es.STOPPED
    assert state["units"][UNIT]["stopped_by_plan"] == 2


@pytest.mark.parametrize("document,why", [
    (signed(plan(), token=b"another-cluster-token"), "bad signature"),
    ({"plan": plan().to_dict(), "mac": "00" * 32}, "bad signature"),
    ({"plan": {**plan().to_dict(), "generation": 9}, "mac": signed(plan())["mac"]},
     "bad signature"),
    (signed(plan(release="r-0")), "this node runs"),
    (signed(plan(cluster="other")), "this node runs"),
    ("not a plan", "not a signed plan"),
])
def test_plans_it_must_not_follow_are_ignored(tmp_path, document, why):
    agent, systemd = make_agent(tmp_path, [document])
    assert agent.step() is None
    assert stops(systemd) == []
    assert why in agent.plan_view.error


def test_without_a_token_it_follows_nothing(tmp_path):
    agent, systemd = make_agent(tmp_path, [signed(plan())], token=b"")
    agent.token = None
    assert agent.step() is None and stops(systemd) == []
    assert "ASCENDCTL_HEALTH_TOKEN" in agent.plan_view.error


def test_an_older_generation_than_seen_is_stale(tmp_path):
    agent, systemd = make_agent(tmp_path, [signed(plan(5, "run")), signed(plan(3))])
    agent.step()
    assert agent.step() is None and stops(systemd) == []
    assert "stale generation 3" in agent.plan_view.error


def test_no_plan_means_hands_off(tmp_path):
    agent, systemd = make_agent(tmp_path, [None, None])
    systemd.crash()
    assert agent.step() is None and agent.step() is None
    assert [c for c in systemd.calls if c[0] != "start"] == []


def test_start_waits_for_its_turn_in_the_rank_order(tmp_path):
    agent, systemd = make_agent(tmp_path, [signed(plan(2, "stop")), signed(plan(2, "start", upto=0)),
                                           signed(plan(2, "start", upto=1)),
                                           signed(plan(2, "start", upto=1))])
    agent.step()
    before = len([c for c in systemd.calls if c[0] == "start"])
    agent.step()                                 # only the head (step 0) may start
    assert len([c for c in systemd.calls if c[0] == "start"]) == before
    agent.step()                                 # now node1's step 1
    agent.step()                                 # and only once
    assert len([c for c in systemd.calls if c[0] == "start"]) == before + 1
    assert systemd.units[UNIT].active == "active"
    assert agent.snapshot()["starts"] == {UNIT: 1}


def test_what_it_did_survives_a_restart_of_the_agent(tmp_path):
    agent, systemd = make_agent(tmp_path, [signed(plan())])
    agent.step()
    config = agent.config
    again = Agent(config, systemd=systemd, npu_table=lambda: ([], ""),
                  plan_source=lambda: signed(plan()), clock=Clock(), boot=lambda: "b1",
                  token=TOKEN)
    again.step()
    assert len(stops(systemd)) == 1
    saved = json.loads((tmp_path / "health" / "agent.json").read_text())
    assert saved["stopped_for"] == 2


# -- engine_state.classify ----------------------------------------------------------------

def show(**values):
    return es.UnitShow(unit=UNIT, load="loaded", **values)


def test_classify_running_crashed_and_exit_descriptions():
    memory = es.UnitMemory(boot_id="b")
    running = es.classify(show(active="active", active_since=100.0), memory, "b", now=130.0)
    assert running.state == es.RUNNING and running.active_for_s == 30.0
    crashed = es.classify(show(active="failed", result="exit-code", exit_code="exited",
                               exit_status=137), memory, "b")
    assert crashed.state == es.CRASHED
    assert crashed.exit == "status 137: engine killed by signal KILL"
    killed = es.classify(show(active="failed", result="signal", exit_code="killed",
                              exit_status=9), memory, "b")
    assert killed.exit == "signal KILL"
    flag = es.classify(show(active="failed", result="exit-code", exit_code="exited",
                            exit_status=2), memory, "b")
    assert flag.exit == "status 2"


def test_an_inactive_unit_is_a_deliberate_stop_only_if_it_ran_in_this_boot():
    inactive = show(active="inactive", result="success")
    seen = es.UnitMemory(boot_id="b", seen_running=True)
    assert es.classify(inactive, seen, "b").state == es.STOPPED
    assert es.classify(inactive, seen, "b-after-reboot").state == es.NOT_STARTED
    assert es.classify(inactive, es.UnitMemory(), "b").state == es.NOT_STARTED
    reset = es.UnitMemory(boot_id="b", seen_running=True, crashed_at=5.0, crash="signal KILL")
    # crashed, then someone ran reset-failed: still a crash, never a clean stop
    assert es.classify(inactive, reset, "b").state == es.CRASHED
    missing = es.UnitShow(unit=UNIT, load="not-found", active="inactive")
    assert es.classify(missing, seen, "b").state == es.MISSING


def test_memory_follows_what_was_seen():
    state = es.classify(show(active="active", active_since=1.0), es.UnitMemory(), "b")
    memory = es.remember(es.UnitMemory(), state, "b", 2.0)
    assert memory == es.UnitMemory(boot_id="b", seen_running=True)
    crashed = es.classify(show(active="failed", result="signal", exit_code="killed",
                               exit_status=9, inactive_since=3.0), memory, "b")
    memory = es.remember(memory, crashed, "b", 4.0)
    assert memory.crashed_at == 3.0 and memory.crash == "signal KILL"


def test_parse_show_reads_blocks_in_the_order_asked():
    text = ("MainPID=741\nResult=success\nExecMainStartTimestamp=@1796120015\nExecMainCode=0\n"
            "ExecMainStatus=0\nControlGroup=/system.slice/ascendctl-engine.service\n"
            "LoadState=loaded\nActiveState=active\nSubState=running\n"
            "ActiveEnterTimestamp=@1796120015\nInactiveEnterTimestamp=\n\n"
            "MainPID=0\nResult=signal\nExecMainStartTimestamp=@1796120000\nExecMainCode=2\n"
            "ExecMainStatus=9\nControlGroup=\nLoadState=loaded\nActiveState=failed\n"
            "SubState=failed\nActiveEnterTimestamp=\nInactiveEnterTimestamp=@1796120100\n")
    shows = es.parse_show(text, ["a.service", "b.service"])
    assert shows["a.service"].active == "active" and shows["a.service"].main_pid == 741
    assert shows["a.service"].active_since == 1796120015.0
    assert shows["b.service"].exit_code == "killed" and shows["b.service"].exit_status == 9
    assert shows["b.service"].inactive_since == 1796120100.0


def test_npu_holders_tell_the_engine_from_a_foreign_process():
    holders = es.npu_holders([(0, 741, "python3", 59017), (3, 4242, "leftover", 1200)], "",
                             {741}, [UNIT])
    assert [p.pid for p in holders.foreign] == [4242]
    assert not holders.free and holders.ok
    assert es.npu_holders([], "", set(), [UNIT]).free
    unreadable = es.npu_holders(None, "dcmi module initialize failed. ret is -8005", set(), [])
    assert not unreadable.ok and not unreadable.free


def test_the_telling_journal_line_of_a_crash():
    lines = ["INFO 12-01 [multiproc_executor.py:843] Parent process exited",
             "ascendctl-launcher: rank 1: the engine was killed by signal 9",
             "ascendctl-engine.service: Main process exited, code=exited, status=137/n/a",
             "ascendctl-engine.service: Failed with result 'exit-code'."]
    assert es.telling_line(lines) == "ascendctl-launcher: rank 1: the engine was killed by signal 9"
    lines = ["usage: vllm serve [-h] ...", "vllm: error: unrecognized arguments: --no-such-flag",
             "ascendctl-launcher: rank 1: the engine exited with status 2",
             "ascendctl-engine.service: Failed with result 'exit-code'."]
    assert es.telling_line(lines) == "vllm: error: unrecognized arguments: --no-such-flag"


def test_a_published_crash_line_never_holds_a_secret(tmp_path):
    secrets = tmp_path / "secrets.env"
    secrets.write_text('VLLM_API_KEY="sk-secret-00112233"\nASCENDCTL_HEALTH_TOKEN="tok-445566"\n')
    agent, systemd = make_agent(tmp_path, [])
    agent.config.secrets_file = str(secrets)
    systemd.crash()
    systemd.journal = lambda unit: "Error: bad request with api_key='sk-secret-00112233'"
    line = agent.snapshot()["units"][UNIT]["journal"]
    assert line == "Error: bad request with api_key='[REDACTED]'"
