"""`ascendctl status` from the nodes' raw answers: the verdict never says healthy unless a
real completion answered and every rank runs; every reason names the node and rank."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ascendctl.exitcodes import Exit
from ascendctl.status import ClusterStatus, NodeStatus, Verdict, node_status, verdict
from ascendctl.status.parse import supervisor_status
from tests.unit.test_plan_inventories import make_inventory

FIXTURES = Path(__file__).parent.parent / "fixtures"
ENGINE = "ascendctl-engine.service"
SIDE = ("ascendctl-exporter.service", "ascendctl-watchdog.service")
SUPERVISOR = "ascendctl-supervisor.service"
NOW = 1_796_120_100.0


def capture(name: str) -> str:
    return "".join((FIXTURES / name).read_text().splitlines(keepends=True)[1:])


IDLE = capture("npu-smi_info_910B3_8npu_idle.txt")


def unit(state="running", active="active", sub="running", **extra):
    return {"state": state, "active": active, "sub": sub, "since": NOW - 600, "exit": None,
            "journal": None, "main_pid": 741, "result": "success", **extra}


def raw(head: bool, **changes):
    answer = {
        "current": "r-1", "time": NOW, "npu_smi": {"rc": 0, "out": IDLE},
        "links": [{"rc": 0, "out": "link status: UP"}] * 8,
        "states": {ENGINE: unit(), **{u: unit() for u in SIDE}},
        "engine_pids": [741], "starts": {},
    }
    if head:
        answer["states"][SUPERVISOR] = unit()
        answer.update(probe={"ok": True, "seconds": 0.04, "error": None}, health={"status": 200},
                      metrics={"vllm:generation_tokens_total": 10.0},
                      supervisor={"phase": "serving", "generation": 1, "attempt": 0,
                                  "max_attempts": 3, "recoveries_total": 0},
                      supervisor_age_s=1.0, hold=None)
    for key, value in changes.items():
        answer[key] = value
    return answer


@pytest.fixture()
def inv(tmp_path):
    return make_inventory(tmp_path)


def cluster(inv, raws: dict[str, dict | None]) -> ClusterStatus:
    nodes = []
    for host in inv.hosts:
        answer = raws.get(host.name)
        if answer is None:
            nodes.append(NodeStatus(name=host.name, rank=host.rank, reachable=False,
                                    error="connect timed out after 10 s"))
        else:
            nodes.append(node_status(host, answer, expect_npus=8, engine_units=[ENGINE]))
    sup = supervisor_status(raws.get(inv.head.name), SUPERVISOR)
    state, reasons = verdict(inv, nodes, sup)
    return ClusterStatus(cluster="c", verdict=state, reasons=reasons, nodes=nodes, supervisor=sup)


def healthy(inv):
    return {"node0": raw(True), "node1": raw(False)}


def test_healthy_needs_the_probe_and_every_rank(inv):
    status = cluster(inv, healthy(inv))
    assert status.verdict == Verdict.HEALTHY and status.reasons == []
    assert status.exit_code == Exit.OK
    assert status.to_dict()["verdict"] == "healthy"


def test_a_crashed_follower_is_down_and_named(inv):
    raws = healthy(inv)
    raws["node1"]["states"][ENGINE] = unit("crashed", "failed", "failed", since=NOW - 7,
                                          exit="signal KILL", journal="ascendctl-launcher: "
                                          "rank 1: the engine was killed by signal 9")
    raws["node1"]["starts"] = {ENGINE: 2}
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN and status.exit_code == Exit.FAILED
    reason = next(r for r in status.reasons if "engine crashed" in r)
    assert reason.startswith("rank 1 (node1): engine crashed 7 s ago (signal KILL)")
    assert "restarted 2 time(s)" in reason


def test_health_200_without_a_completion_is_down(inv):
    """The measured bug: the head answered /health while every completion hung."""
    raws = healthy(inv)
    raws["node0"]["probe"] = {"ok": False, "seconds": 5.0,
                              "error": "completion: no answer within 5 s"}
    status = cluster(inv, raws)
    assert status.nodes[0].engine_up is True
    assert status.verdict == Verdict.DOWN
    assert any("no completion from node0" in r and "no answer within 5 s" in r
               for r in status.reasons)


def test_an_unreachable_follower_is_down_with_exit_4(inv):
    raws = healthy(inv)
    raws["node1"] = None
    raws["node0"]["probe"] = {"ok": False, "error": "completion: no answer within 5 s"}
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN and status.exit_code == Exit.UNREACHABLE
    assert status.reasons[0].startswith("rank 1 (node1) unreachable")


def test_a_recovery_under_way_is_down_and_first(inv):
    raws = healthy(inv)
    raws["node0"]["supervisor"].update(
        phase="starting", attempt=1, generation=4, detected_at=NOW - 12,
        cause="rank 1 (node1): ascendctl-engine.service crashed (signal KILL)",
        waiting_for=[])
    raws["node1"]["states"][ENGINE] = unit("stopped", "inactive", "dead", stopped_by_plan=4)
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN
    assert status.reasons[0].startswith("recovering (starting, attempt 1/3) since 12 s ago: "
                                        "rank 1 (node1)")
    assert any("stopped by recovery (generation 4)" in r for r in status.reasons)


def test_gave_up_says_why_and_what_to_do(inv):
    raws = healthy(inv)
    raws["node0"]["supervisor"].update(
        phase="gave-up", attempt=3, gave_up_reason="3 attempt(s) failed; last: warm-up: rank 1 "
        "(node1): ascendctl-engine.service crashed (status 2): vllm: error: unrecognized "
        "arguments: --bad")
    for name in ("node0", "node1"):
        raws[name]["states"][ENGINE] = unit("stopped", "inactive", "dead", stopped_by_plan=7)
    raws["node0"]["probe"] = {"ok": False, "error": "completion: [Errno 111] Connection refused"}
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN
    assert status.reasons[0].startswith("recovery gave up: 3 attempt(s) failed")
    assert "unrecognized arguments" in status.reasons[0] and "ascendctl deploy" in status.reasons[0]


def test_an_operators_stop_is_named_as_such(inv):
    raws = healthy(inv)
    raws["node1"]["states"][ENGINE] = unit("stopped", "inactive", "dead")
    raws["node0"]["supervisor"]["paused"] = "rank 1 (node1): stopped on purpose"
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN
    assert any("rank 1 (node1): engine stopped (systemctl stop, not a crash)" in r
               for r in status.reasons)
    assert any(r.startswith("recovery paused") for r in status.reasons)


@pytest.mark.parametrize("change,expect", [
    (lambda r: r["node1"].update(npu_smi={"rc": 0, "out": IDLE.replace(
        "| 0     910B3               | OK  ", "| 0     910B3               | Alarm")}),
     "NPU 0 health Alarm"),
    (lambda r: r["node1"].update(links=[{"rc": 0, "out": "link status: DOWN"}]
                                 + [{"rc": 0, "out": "link status: UP"}] * 7),
     "RoCE port(s) 0 not UP"),
    (lambda r: r["node0"]["states"].update({SUPERVISOR: unit("crashed", "failed", "failed")}),
     "not running"),
    (lambda r: r["node1"].update(current="r-0"), "nodes disagree on the release"),
    (lambda r: r["node0"].update(hold={"until": NOW + 600, "by": "deploy@ci", "reason": "r-2"}),
     "recovery held by deploy@ci"),
])
def test_serving_with_something_wrong_is_degraded(inv, change, expect):
    raws = healthy(inv)
    change(raws)
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DEGRADED, status.reasons
    assert status.exit_code == Exit.WARNINGS
    assert any(expect in r for r in status.reasons), status.reasons


def with_process_rows(rows: list[str]) -> str:
    """The idle capture with process rows in npu-smi's own format for NPU 0 (as
    tests/unit/test_facts_npu_smi.py builds them)."""
    lines = IDLE.splitlines()
    i = next(n for n, line in enumerate(lines) if "No running processes found in NPU 0" in line)
    return "\n".join(lines[:i] + rows + lines[i + 1:]) + "\n"


ROW = "| %-7d %-18d| %-13d | %-24s | %-24d |"


def test_hbm_held_by_a_foreign_process_is_degraded_and_named(inv):
    raws = healthy(inv)
    raws["node1"]["npu_smi"] = {"rc": 0, "out": with_process_rows(
        [ROW % (0, 0, 741, "/opt/vllm/bin/py", 50000), ROW % (0, 0, 4242, "leftover", 59017)])}
    status = cluster(inv, raws)
    node1 = status.nodes[1]
    assert [p.pid for p in node1.npu_processes] == [741, 4242]
    assert [p.pid for p in node1.foreign] == [4242]       # 741 is in the engine's cgroup
    assert status.verdict == Verdict.DEGRADED
    assert any(r.startswith("rank 1 (node1): NPU 0 HBM held by PID 4242") and "not the engine"
               in r for r in status.reasons)


def test_not_deployed_is_down(inv):
    raws = healthy(inv)
    for name in raws:
        raws[name]["states"] = {u: unit("missing", "inactive", "dead") for u in
                                (ENGINE, *SIDE)}
        raws[name]["current"] = None
    status = cluster(inv, copy.deepcopy(raws))
    assert status.verdict == Verdict.DOWN
    assert any("not deployed" in r for r in status.reasons)


def test_a_supervisor_started_a_moment_ago_without_state_yet_is_not_a_problem(inv):
    raws = healthy(inv)
    raws["node0"]["supervisor"], raws["node0"]["supervisor_age_s"] = None, None
    raws["node0"]["states"][SUPERVISOR] = unit(since=NOW - 2)
    assert cluster(inv, raws).verdict == Verdict.HEALTHY      # right after a deploy
    raws["node0"]["states"][SUPERVISOR] = unit(since=NOW - 600)
    status = cluster(inv, raws)                                 # running, but silent
    assert status.verdict == Verdict.DEGRADED
    assert any("supervisor on node0 is not running" in r for r in status.reasons)


def test_an_unreachable_rank_while_the_group_still_answers_is_degraded(inv):
    raws = healthy(inv)
    raws["node1"] = None                     # e.g. sshd down on node1, the engine still runs
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DEGRADED and status.exit_code == Exit.UNREACHABLE
    assert any(r.startswith("rank 1 (node1) unreachable") and "still answers" in r
               for r in status.reasons)


def test_a_node_in_maintenance_is_down_with_who_when_and_why(inv):
    raws = healthy(inv)
    raws["node1"]["maintenance"] = {"state": "drained", "since": NOW - 60, "by": "policy",
                                    "reason": "ecc.multi_bit on npu0: 0 -> 1", "key":
                                    "ecc.multi_bit", "evidence": "HBM Double Bit Error Count : 1"}
    raws["node1"]["states"][ENGINE] = unit("stopped", "inactive", "dead", since=NOW - 50)
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DOWN
    reason = status.reasons[0]
    assert reason.startswith("node1 drained since ") and "by policy: ecc.multi_bit on npu0" in reason
    assert "evidence: HBM Double Bit Error Count : 1" in reason
    assert reason.endswith("out of service until `ascendctl node undrain node1`")
    assert not any("engine" in r and "stopped" in r for r in status.reasons)
    assert status.nodes[1].maintenance["key"] == "ecc.multi_bit"


def test_a_fault_signal_present_now_is_degraded_and_a_past_event_is_not(inv):
    raws = healthy(inv)
    raws["node1"]["fault_events"] = [{"key": "ecc.multi_bit", "subject": "npu0",
                                      "action": "drain", "time": NOW - 100}]
    assert cluster(inv, raws).verdict == Verdict.HEALTHY
    raws["node1"]["fault_signals"] = [{"key": "link.down", "subject": "port3",
                                       "detail": "link status DOWN"}]
    raws["node1"]["fault_limits"] = "only one serving group: drain and isolate act as alert"
    status = cluster(inv, raws)
    assert status.verdict == Verdict.DEGRADED
    assert "rank 1 (node1): fault signal link.down on port3: link status DOWN (only one " \
        "serving group: drain and isolate act as alert)" in status.reasons
