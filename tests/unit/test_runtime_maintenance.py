"""Node maintenance on the nodes: the record (maintenance.py), the supervisor's maintenance
phase with the real agents (health_sim.py fakes systemd, time and the probe), the fault
policy's actions (faults/actions.py), and the gateway watcher on the real rendered nginx
site, checked by the real `nginx -t`."""

from __future__ import annotations

import json

import pytest

from ascendctl_runtime import gateway, healthstore, layout, maintenance
from ascendctl_runtime.contract import GatewayConfig, GatewayGroup
from ascendctl_runtime.faults import actions
from ascendctl_runtime.faults.monitor import FaultEvent
from tests.unit.health_sim import UNIT, Cluster
from tests.unit.test_playbook_rolling import group_inventory
from tests.unit.test_replicas import nginx_t


def drain(root, node="node1", state="drained", by="operator (ops@jump)", reason="disk swap"):
    return maintenance.enter(str(root), node, maintenance.Maintenance(
        state=state, since=1.0, by=by, reason=reason))


# -- the record ----------------------------------------------------------------------------

def test_a_milder_state_never_replaces_a_more_severe_one_and_clear_is_in_history(tmp_path):
    assert drain(tmp_path)[1] is True
    record, changed = drain(tmp_path, state="isolated", by="policy", reason="ecc.multi_bit")
    assert changed and record.state == "isolated"
    record, changed = drain(tmp_path)
    assert not changed and record.state == "isolated"
    assert maintenance.clear(str(tmp_path), "node1", "operator").state == "isolated"
    assert maintenance.read(str(tmp_path)) is None
    assert maintenance.clear(str(tmp_path), "node1", "operator") is None
    history = [json.loads(line) for line in (tmp_path / layout.HISTORY_FILE).read_text()
               .splitlines()]
    assert [e["event"] for e in history] == ["drained", "isolated", "undrained"]
    assert "was isolated by policy" in history[-1]["reason"]


def test_a_damaged_record_keeps_the_node_out(tmp_path):
    path = tmp_path / layout.HEALTH_DIR / layout.MAINTENANCE_FILE
    path.parent.mkdir()
    path.write_text('{"state": "serving"}')
    record = maintenance.read(str(tmp_path))
    assert record is not None and record.state == "drained"
    assert "unreadable maintenance file" in record.reason and "undrain" in record.reason


def test_a_record_without_a_reason_is_refused(tmp_path):
    with pytest.raises(ValueError, match="reason"):
        maintenance.op_enter(str(tmp_path), "node1", "drained", "operator", "   ")
    with pytest.raises(ValueError, match="state"):
        maintenance.op_enter(str(tmp_path), "node1", "serving", "operator", "x")
    assert maintenance.read(str(tmp_path)) is None


# -- the supervisor's maintenance phase ------------------------------------------------------

def test_a_drained_node_takes_its_group_out_then_it_returns_through_a_recovery(tmp_path):
    cluster = Cluster(tmp_path, drain_timeout_s=60.0)
    cluster.gateway = False
    cluster.in_flight_answers = [3.0, 1.0, 0.0, 0.0]
    drain(tmp_path / "node1")
    cluster.step()
    assert cluster.phase == "maintenance" and cluster.stages() == ["maintenance"]
    for _ in range(5):               # the gateway has not taken it out yet: still serving
        cluster.step()
    assert all(n.systemd.units[UNIT].active == "active" for n in cluster.nodes)
    assert cluster.supervisor.state.waiting_for == [
        "the gateway to take the group out of the balancer"]
    cluster.gateway = True
    cluster.run_until(lambda: all(n.systemd.units[UNIT].active == "inactive"
                                  for n in cluster.nodes))
    assert cluster.stages() == ["maintenance", "maintenance-out", "maintenance-stop"]
    stop = cluster.events[-1]
    assert "drained in" in stop["reason"] and stop["node"] == "node1"
    assert "node1 drained by operator (ops@jump): disk swap" in cluster.events[0]["reason"]
    # no recovery while it is out, whatever happens on the nodes
    cluster.node("node0").systemd.crash()
    for _ in range(100):
        cluster.step()
    assert cluster.stages()[-1] == "maintenance-stop"
    assert "ascendctl node undrain node1" in cluster.supervisor.state.paused
    maintenance.clear(str(tmp_path / "node1"), "node1", "operator")
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert cluster.stages()[-3:] == ["maintenance-end", "started", "recovered"]
    assert "returned from maintenance" in cluster.events[-2]["cause"]
    assert cluster.serving() and cluster.supervisor.state.paused is None


def test_a_gateway_that_does_not_answer_does_not_hold_the_drain_forever(tmp_path):
    cluster = Cluster(tmp_path, drain_timeout_s=20.0)
    cluster.gateway = False                    # never confirms
    cluster.in_flight_answers = [5.0] * 100    # and the head never gets idle
    drain(tmp_path / "node0", node="node0")
    ticks = cluster.run_until(lambda: cluster.stages()[-1:] == ["maintenance-stop"])
    assert 20 <= ticks * 2 <= 2 * 20 + 8       # two bounded waits of 20 s (2 s ticks)
    assert "did not take it out within 20 s" in cluster.events[1]["reason"]
    assert "drain timed out after 20 s with 5 in flight" in cluster.events[2]["reason"]


def test_a_restart_request_of_the_fault_policy_restarts_the_group_and_says_so(tmp_path):
    cluster = Cluster(tmp_path)
    event = FaultEvent(time=cluster.clock.now, key="EI0013", subject="node", action="restart",
                       policy_action="restart", source="vllm-ascend#7384", rule="d.json:9",
                       detail="log", evidence="Execution_Error_ROCE_CQE(EI0013): ...")
    assert "gang restart" in actions.act(str(tmp_path / "node1"), "node1", event)
    cluster.run_until(lambda: cluster.stages()[-1:] == ["recovered"])
    assert "rank 1 (node1): fault policy: EI0013 on node" in cluster.events[0]["cause"]
    # a request from before the supervisor started (a deploy since) is not acted on
    stale = FaultEvent(**{**event.to_dict(), "time": cluster.supervisor.started_at - 1})
    actions.act(str(tmp_path / "node1"), "node1", stale)
    for _ in range(30):
        cluster.step()
    assert cluster.stages()[-1] == "recovered" and len(cluster.stages()) == 2


def test_a_drain_action_puts_the_node_in_maintenance_with_its_evidence(tmp_path):
    event = FaultEvent(time=1.0, key="ecc.multi_bit", subject="npu3", action="isolate",
                       policy_action="isolate", source="MindCluster", rule="d.json:40",
                       detail="0 -> 1", evidence="\tHBM Double Bit Error Count : 1")
    assert actions.act(str(tmp_path), "node1", event) == "node isolated"
    record = maintenance.read(str(tmp_path))
    assert (record.state, record.by, record.key) == ("isolated", "policy", "ecc.multi_bit")
    assert record.evidence == "\tHBM Double Bit Error Count : 1"
    assert "ecc.multi_bit on npu3: 0 -> 1" in record.reason
    assert actions.act(str(tmp_path), "node1", event) == "node already isolated"
    alert = FaultEvent(**{**event.to_dict(), "action": "alert"})
    assert actions.act(str(tmp_path), "node1", alert) == "alerted"


# -- the gateway watcher -----------------------------------------------------------------------

@pytest.fixture
def site(tmp_path):
    from ascendctl.render.proxy import render_site

    inv = group_inventory(tmp_path, groups=3, per_group=1)
    return render_site(inv, drained={"g2"}).decode()


def test_marking_a_group_down_and_up_edits_only_the_server_lines(tmp_path, site):
    """Marking edits the server lines alone: the group's `down`, and `max_fails` as the
    renderer gives it for the groups left live (0 for the only one: see the next test)."""
    assert gateway.marked_down(site) == {"g2"}
    assert site.count("max_fails=1 ") == 3         # two groups live
    out = gateway.mark(site, down={"g1"}, up=())
    assert gateway.marked_down(out) == {"g1", "g2"}
    changed = [(a, b) for a, b in zip(site.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == 3, changed           # one value for every server line
    for before, after in changed:
        assert after.startswith("    server ") and "max_fails=0 " in after
        assert after.replace("max_fails=0 ", "max_fails=1 ") in (before, before[:-1] + " down;")
    assert changed[1][1].endswith(" down;") and not changed[1][0].endswith(" down;")   # g1
    nginx_t(tmp_path / "nginx", out)
    assert gateway.mark(out, down=(), up={"g1"}) == site
    assert gateway.mark(site, down=(), up=()) == site
    from ascendctl.render.proxy import render_site

    # the watcher's server lines are the renderer's for the same groups out
    inv = group_inventory(tmp_path, groups=3, per_group=1)
    rendered = render_site(inv, drained={"g1", "g2"}).decode()

    def servers(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("    server ")]

    assert servers(out) == servers(rendered)


class Gateway:
    """The watcher's I/O: node answers, the heads' /health, nginx (the site in memory)."""

    def __init__(self, site: str):
        self.site, self.applied = site, []
        self.states = {"n0": {}, "n1": {}, "n2": {}}
        self.healthy = {"g0": True, "g1": True, "g2": True}

    def fetch(self, url, _timeout):
        node = url.split("//")[1].split(":")[0]
        return self.states[node]

    def apply(self, _path, content_b64):
        import base64

        self.site = base64.b64decode(content_b64).decode()
        self.applied.append(gateway.marked_down(self.site))
        return {"reloaded": True}


def watcher(tmp_path, io: Gateway) -> gateway.GatewayWatcher:
    groups = [GatewayGroup(name=f"g{i}", health_url=f"http://g{i}/health", nodes=(f"n{i}",),
                           state_urls=(f"http://n{i}:9101/health/state",)) for i in range(3)]
    config = GatewayConfig(cluster="t", root=str(tmp_path), groups=groups,
                           site_path="/etc/nginx/conf.d/ascendctl-t.conf")
    return gateway.GatewayWatcher(config, fetch=io.fetch, apply=io.apply,
                                  healthy=lambda url, _t: io.healthy[url.split("//")[1][:2]],
                                  read_site=lambda _p: io.site)


def test_the_watcher_takes_a_group_in_maintenance_out_and_back_once_it_answers(tmp_path, site):
    io = Gateway(site)
    w = watcher(tmp_path, io)
    assert w.step()["out"] == [] and io.applied == []
    io.states["n1"] = {"maintenance": {"state": "drained"}}
    view = w.step()
    assert view["out"] == ["g1"] and io.applied == [{"g1", "g2"}]   # g2: the deploy's, kept
    assert json.loads((tmp_path / "health" / "gateway.json").read_text())["out"] == ["g1"]
    w.step()
    assert len(io.applied) == 1                                    # nothing new to apply
    io.states["n1"], io.healthy["g1"] = {}, False                  # returned, not serving yet
    assert w.step()["out"] == ["g1"] and len(io.applied) == 1
    io.healthy["g1"] = True
    assert w.step()["out"] == [] and io.applied[-1] == {"g2"}
    events = healthstore.read_events(str(tmp_path), 10)
    assert [e["reason"] for e in events] == ["g1 out (maintenance: n1 drained)", "g1 back in"]
    # a restarted watcher remembers what it took out
    io.states["n0"] = {"maintenance": {"state": "isolated"}}
    watcher(tmp_path, io).step()
    assert watcher(tmp_path, io).ours == {"g0"}


def test_the_watcher_never_takes_every_group_out_and_leaves_unknown_nodes_alone(tmp_path, site):
    io = Gateway(site)
    io.states = {n: {"maintenance": {"state": "drained"}} for n in ("n0", "n1", "n2")}
    view = watcher(tmp_path, io).step()
    assert view["out"] == ["g1"] and gateway.marked_down(io.site) == {"g1", "g2"}
    assert "g0 stays in the balancer" in view["error"]
    io.states = {"n0": {}, "n1": None, "n2": {}}                  # n1 does not answer
    w = watcher(tmp_path, io)
    assert w.step()["out"] == ["g1"]                               # left as it was
