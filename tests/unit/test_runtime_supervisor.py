"""Gang recovery end to end in-process: the real supervisor and the real agents, talking
through the real signed plan file; systemd, time, npu-smi and the probe are fakes
(tests/unit/health_sim.py). The lab tests run the same code on real nodes."""

from __future__ import annotations

import json

from ascendctl_runtime import healthstore, layout
from tests.unit.health_sim import UNIT, Cluster


def starts(cluster: Cluster) -> list[str]:
    """Every engine start in the order it happened (node names)."""
    order = []
    for node in cluster.nodes:
        for index, call in enumerate(node.systemd.calls):
            if call[0] == "start":
                order.append((node.systemd.calls[:index].count(("start", UNIT)), node.name))
    return [name for _i, name in order]


def start_sequence(cluster: Cluster) -> list[str]:
    seq = []
    original = {n.name: n.systemd.run for n in cluster.nodes}
    for node in cluster.nodes:
        def run(*args, _node=node):
            if args[0] == "start":
                seq.append(_node.name)
            return original[_node.name](*args)
        node.systemd.run = run
    return seq


def test_a_healthy_group_is_left_alone(tmp_path):
    cluster = Cluster(tmp_path)
    for _ in range(30):
        cluster.step()
    assert cluster.events == [] and cluster.phase == "serving"
    assert all(n.systemd.units[UNIT].pid == 1001 + i or n.systemd.units[UNIT].active == "active"
               for i, n in enumerate(cluster.nodes))
    assert all(call[0] != "stop" for n in cluster.nodes for call in n.systemd.calls)


def test_a_follower_crash_restarts_the_whole_group_head_first(tmp_path):
    cluster = Cluster(tmp_path)
    seq = start_sequence(cluster)
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert cluster.stages() == ["started", "recovered"]
    started = cluster.events[0]
    assert (started["node"], started["rank"]) == ("node1", 1)
    assert "rank 1 (node1)" in started["cause"] and "crashed" in started["cause"]
    assert "signal 9" in started["cause"] or "KILL" in started["cause"]
    # both ranks were stopped, then started in rank order
    assert seq == ["node0", "node1"]
    assert any(call[:1] == ("stop",) for call in cluster.node("node0").systemd.calls)
    assert cluster.serving()
    state = cluster.supervisor.state
    assert state.recoveries_total == 1 and state.last_recovery["seconds"] > 0


def test_the_follower_starts_only_after_the_head_settled(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.node("node0").systemd.crash()
    cluster.run_until(lambda: cluster.phase == "starting")
    cluster.run_until(lambda: cluster.node("node0").systemd.units[UNIT].active == "active")
    head_up = cluster.node("node0").systemd.units[UNIT].active_since
    cluster.run_until(lambda: cluster.node("node1").systemd.units[UNIT].active == "active")
    follower_up = cluster.node("node1").systemd.units[UNIT].active_since
    assert follower_up - head_up >= cluster.supervisor.config.settle_s


def test_an_intentional_stop_is_never_restarted(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.node("node1").systemd.run("stop", UNIT)     # an operator's systemctl stop
    for _ in range(60):
        cluster.step()
    assert cluster.stages() == ["hands-off"]
    assert cluster.node("node1").systemd.units[UNIT].active == "inactive"
    assert "stopped on purpose" in (cluster.supervisor.state.paused or "")
    # the operator keeps working by hand (as the doctor's lab test does): still hands off
    cluster.node("node1").systemd.run("start", UNIT)
    cluster.node("node0").systemd.crash()
    for _ in range(60):
        cluster.step()
    assert cluster.stages() == ["hands-off"]
    # once the group serves again, it is supervised again
    cluster.node("node0").systemd.run("reset-failed", UNIT)
    cluster.node("node0").systemd.run("start", UNIT)
    cluster.run_until(lambda: cluster.supervisor.state.manual is None)
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.stages()[-2:] == ["started", "recovered"])


def test_a_probe_that_fails_long_enough_restarts_the_group(tmp_path):
    cluster = Cluster(tmp_path, probe_failure_s=20.0)
    hung = {"ok": False, "seconds": 10.0, "error": "completion: no answer within 10 s"}
    cluster.probe_answers = [hung] * 8
    cluster.run_until(lambda: "started" in cluster.stages())
    assert "serving probe failed" in cluster.events[0]["cause"]
    waited = cluster.events[0]["t"] - cluster.events[0]["detected_at"]
    assert 20.0 <= waited < 35.0
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])


def test_a_busy_engine_whose_counter_advances_is_not_restarted(tmp_path):
    cluster = Cluster(tmp_path, probe_failure_s=20.0)
    slow = {"ok": False, "seconds": 10.0, "error": "completion: no answer within 10 s"}
    cluster.probe_answers = [slow] * 30
    for tick in range(60):
        cluster.tokens = 1000.0 + 50 * tick       # generation_tokens_total advances
        cluster.step()
    assert cluster.events == []


def test_a_powered_off_follower_is_waited_for_then_the_group_recovers(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.power_off("node1")
    cluster.run_until(lambda: cluster.phase == "stopping")
    assert "unreachable" in cluster.events[0]["cause"]
    for _ in range(200):                # ten minutes away: no attempt is used up
        cluster.step()
    assert cluster.phase == "stopping" and cluster.stages() == ["started"]
    assert any("node1 (unreachable)" in w for w in cluster.supervisor.state.waiting_for)
    cluster.power_on("node1")
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert cluster.serving() and cluster.supervisor.state.attempt == 1


def test_a_rebooted_head_restarts_the_group(tmp_path):
    cluster = Cluster(tmp_path)
    node = cluster.node("node0")
    for unit in node.systemd.units.values():
        unit.active, unit.pid = "inactive", 0
    cluster.power_on("node0")         # new boot id: its engine never started since boot
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert "not running since the node booted" in cluster.events[0]["cause"]


def test_a_rank_that_fails_every_start_is_retried_with_back_off_then_left_stopped(tmp_path):
    cluster = Cluster(tmp_path, max_attempts=3, backoff_s=10.0)
    cluster.node("node1").systemd.crash()
    cluster.node("node1").systemd.units[UNIT].fails_at_start = True
    cluster.run_until(lambda: cluster.phase == "gave-up", limit=800)
    assert cluster.stages() == ["started", "attempt-failed", "retry", "attempt-failed", "retry",
                                "attempt-failed", "gave-up"]
    retries = [e for e in cluster.events if e["stage"] == "retry"]
    assert [e["backoff_s"] for e in retries] == [10.0, 20.0]
    failed = [e for e in cluster.events if e["stage"] == "attempt-failed"]
    assert all("unrecognized arguments" in e["reason"] for e in failed)
    # left stopped, and it stays so: no restart storm
    follower_starts = sum(1 for c in cluster.node("node1").systemd.calls if c[0] == "start")
    for _ in range(300):
        cluster.step()
    assert sum(1 for c in cluster.node("node1").systemd.calls if c[0] == "start") \
        == follower_starts == 1 + 3
    assert all(n.systemd.units[UNIT].active != "active" for n in cluster.nodes)
    assert "unrecognized arguments" in cluster.supervisor.state.gave_up_reason
    saved = json.loads((tmp_path / "node0" / "health" / "supervisor.json").read_text())
    assert saved["phase"] == "gave-up"


def test_a_unit_seen_stopped_after_a_give_up_is_no_hands_off(tmp_path):
    """The give-up's own stop can reach a node's view before its plan marker (seen once on
    the lab): a group left stopped by the supervisor has nobody else's hands on it."""
    cluster = Cluster(tmp_path, max_attempts=1, backoff_s=1.0)
    cluster.node("node1").systemd.crash()
    cluster.node("node1").systemd.units[UNIT].fails_at_start = True
    cluster.run_until(lambda: cluster.phase == "gave-up", limit=800)
    head = cluster.node("node0").systemd
    head.run("start", UNIT)          # seen running again, then stopped without a plan marker
    for _ in range(5):
        cluster.step()
    head.run("stop", UNIT)
    for _ in range(60):
        cluster.step()
    assert cluster.stages()[-1] == "gave-up" and "hands-off" not in cluster.stages()


def test_after_giving_up_a_group_seen_serving_again_is_supervised_again(tmp_path):
    cluster = Cluster(tmp_path, max_attempts=1)
    cluster.node("node1").systemd.units[UNIT].fails_at_start = True
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.phase == "gave-up")
    node1 = cluster.node("node1").systemd
    node1.units[UNIT].fails_at_start = False
    for node in cluster.nodes:                  # a redeploy starts every rank in order
        node.systemd.run("reset-failed", UNIT)
        node.systemd.run("start", UNIT)
    cluster.run_until(lambda: cluster.phase == "serving")
    assert cluster.stages()[-1] == "serving-again"
    node1.crash()
    cluster.run_until(lambda: cluster.stages()[-2:] == ["started", "recovered"])


def test_a_new_crash_before_the_group_was_stable_counts_as_the_next_attempt(tmp_path):
    cluster = Cluster(tmp_path, stable_s=600.0)
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: len(cluster.stages()) == 5)
    assert cluster.stages() == ["started", "recovered", "attempt-failed", "retry", "recovered"]
    assert cluster.supervisor.state.attempt == 2
    cluster.run_until(lambda: cluster.supervisor.state.attempt == 0, limit=400, seconds=5.0)


def test_a_hold_file_holds_every_action(tmp_path):
    cluster = Cluster(tmp_path)
    (tmp_path / "node0" / "supervisor.hold").write_text(json.dumps(
        {"until": cluster.clock.now + 3600, "by": "deploy@ci", "reason": "deploy r-2"}))
    cluster.node("node1").systemd.crash()
    for _ in range(40):
        cluster.step()
    assert cluster.events == [] and cluster.supervisor.plan.action == "hold"
    assert "held by deploy@ci" in cluster.supervisor.state.paused
    (tmp_path / "node0" / "supervisor.hold").unlink()
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])


def test_an_expired_hold_no_longer_holds(tmp_path):
    cluster = Cluster(tmp_path)
    path = tmp_path / "node0" / "supervisor.hold"
    path.write_text(json.dumps({"until": cluster.clock.now + 10, "by": "x", "reason": "y"}))
    cluster.node("node1").systemd.crash()
    cluster.step()
    assert cluster.events == []
    cluster.run_until(lambda: "started" in cluster.stages(), limit=20)


def test_the_hbm_watchdogs_request_goes_through_the_same_gang_restart(tmp_path):
    cluster = Cluster(tmp_path)
    request = {"id": "req-1", "source": "hbm-watchdog", "reason": "NPU 3 HBM 98%"}
    healthstore.write_json(healthstore.health_path(str(tmp_path / "node1"),
                                                   layout.RESTART_REQUEST), request)
    seq = start_sequence(cluster)
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert "HBM watchdog" in cluster.events[0]["cause"] and "NPU 3" in cluster.events[0]["cause"]
    assert seq == ["node0", "node1"]
    # the request is answered once and removed by the agent
    assert not (tmp_path / "node1" / "health" / "restart-request.json").exists()
    for _ in range(30):
        cluster.step()
    assert cluster.stages() == ["started", "recovered"]


def test_npus_held_by_a_foreign_process_block_the_start_then_fail_the_attempt(tmp_path):
    cluster = Cluster(tmp_path, npu_free_timeout_s=30.0, max_attempts=1)
    cluster.node("node1").npu_table = [(0, 4242, "python3", 59017)]
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.phase == "npus")
    cluster.step()
    assert any("PID 4242" in w and "not the engine" in w
               for w in cluster.supervisor.state.waiting_for)
    assert all(n.systemd.units[UNIT].active != "active" for n in cluster.nodes)
    cluster.run_until(lambda: cluster.phase == "gave-up")
    assert "NPUs not free" in cluster.supervisor.state.gave_up_reason


def test_a_stubborn_rank_is_killed_after_the_grace_period(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.node("node0").systemd.units[UNIT].stubborn = True
    cluster.node("node1").systemd.crash()
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    calls = cluster.node("node0").systemd.calls
    assert ("kill", "--signal=SIGKILL", UNIT) in calls


def test_recovery_events_have_their_own_log_merged_with_deploys_in_time_order(tmp_path):
    root = str(tmp_path)
    (tmp_path / "history.jsonl").write_text(
        json.dumps({"event": "deployed", "release": "r-1", "time": "2026-12-01T10:00:00Z"})
        + "\n" + json.dumps({"event": "deployed", "release": "r-2",
                             "time": "2026-12-01T12:00:00Z"}) + "\n")
    healthstore.append_event(root, {"event": "recovery", "stage": "started",
                                    "time": "2026-12-01T11:00:00Z", "t": 1.0})
    healthstore.append_event(root, {"event": "recovery", "stage": "recovered",
                                    "time": "2026-12-01T11:00:00Z", "t": 2.0})
    assert "recovery" not in (tmp_path / "history.jsonl").read_text()   # rollback's tail
    events = healthstore.read_events(root, 10)
    assert [(e["event"], e.get("stage")) for e in events] == [
        ("deployed", None), ("recovery", "started"), ("recovery", "recovered"),
        ("deployed", None)]
    assert len(healthstore.read_events(root, 2)) == 2
