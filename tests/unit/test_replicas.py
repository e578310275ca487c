"""Serving groups (replicas): the inventory's groups and its refusals, the nginx site over
every group's head (with a group taken out, checked by the real `nginx -t`), the lab's
`--replicas` inventory, and the service verdict of `status` over several groups."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.status import NodeStatus, Verdict, judge
from ascendctl.status.parse import node_status
from tests.unit.nginx_run import nginx_conf
from tests.unit.test_playbook_rolling import group_inventory
from tests.unit.test_render_validators import tool
from tests.unit.test_status_verdict import raw

ENGINE = "ascendctl-engine.service"


def test_groups_rank_within_themselves_and_the_gateway_is_the_first_head(tmp_path):
    inv = group_inventory(tmp_path, groups=2, per_group=2)
    assert inv.replicated and inv.group_size == 2
    assert [(g.name, g.hosts, g.head) for g in inv.serving_groups] == \
        [("g0", ("n0", "n1"), "n0"), ("g1", ("n2", "n3"), "n2")]
    assert [h.name for h in inv.heads] == ["n0", "n2"]
    assert inv.gateway.name == "n0"
    view = inv.group_view("g1")
    assert [h.name for h in view.hosts] == ["n2", "n3"] and view.head.name == "n2"
    assert not view.replicated
    assert inv.view_of("n3").head.name == "n2"


def test_a_named_gateway(tmp_path):
    inv = group_inventory(tmp_path, extra_vars="", groups=2)
    text = (tmp_path / "inv.yaml").read_text().replace(
        "proxy: {enabled: true}", "proxy: {enabled: true, gateway: n3}")
    (tmp_path / "inv.yaml").write_text(text)
    assert inv.gateway.name == "n0"
    assert load_inventory(tmp_path / "inv.yaml").gateway.name == "n3"


def refused(tmp_path, edit) -> InputError:
    group_inventory(tmp_path, groups=2, per_group=2)
    path = tmp_path / "inv.yaml"
    path.write_text(edit(path.read_text()))
    with pytest.raises(InputError) as info:
        load_inventory(path)
    return info.value


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("proxy: {enabled: true}", "proxy: {enabled: false}"),
     "2 serving groups need the proxy that balances across their heads"),
    (lambda t: t.replace("n3: {ansible_host: 198.18.250.13, rank: 1}", ""),
     "serving group g1 has 1 node(s), g0 has 2: every group serves the same layout"),
    (lambda t: t.replace("n3: {ansible_host: 198.18.250.13, rank: 1}",
                         "n3: {ansible_host: 198.18.250.13, rank: 2}"),
     "ranks must be 0..1 without gaps within serving group g1; rank 1 is missing"),
    (lambda t: t.replace("n2: {ansible_host: 198.18.250.12, rank: 0}",
                         "n2: {ansible_host: 198.18.250.12, rank: 1}"),
     "rank 1 is also used by n2 in serving group g1"),
    (lambda t: t.replace("proxy: {enabled: true}", "proxy: {enabled: true, gateway: n9}"),
     "no host named 'n9' (hosts: n0, n1, n2, n3)"),
])
def test_inventory_refuses_groups_that_cannot_serve(tmp_path, edit, message):
    error = refused(tmp_path, edit)
    assert message in str(error)
    # one line: file:line: field: message
    assert str(error).startswith(f"{tmp_path / 'inv.yaml'}:") and "\n" not in str(error)


def test_a_host_in_no_group_is_refused(tmp_path):
    def edit(text: str) -> str:
        return text + textwrap.indent(textwrap.dedent("""\
            spare:
              hosts:
                n9: {ansible_host: 198.18.250.30, rank: 0}
            """), "        ")

    error = refused(tmp_path, edit)
    assert "host 'n9' is in no serving group (serving groups: g0, g1); add it to one" \
        in str(error)


def test_the_site_balances_every_head_and_takes_a_drained_group_out(tmp_path):
    from ascendctl.render.proxy import render_site

    inv = group_inventory(tmp_path, groups=3, per_group=1)
    site = render_site(inv, drained={"g1"}).decode()
    servers = [line.strip() for line in site.splitlines() if line.strip().startswith("server ")
               and ":" in line]
    assert [s.split()[1] for s in servers] == \
        ["127.0.0.1:8000", "198.18.250.11:8000", "198.18.250.12:8000"]   # n0 is the gateway
    assert [s.endswith(" down;") for s in servers] == [False, True, False]
    assert "proxy_next_upstream_tries 3;" in site
    with pytest.raises(ValueError):
        render_site(inv, drained={"g0", "g1", "g2"})
    nginx_t(tmp_path / "nginx", site)


def nginx_t(prefix: Path, site: str) -> None:
    """The real `nginx -t` with nginx's default hash sizes."""
    conf = nginx_conf(prefix, site)
    result = subprocess.run([tool("nginx"), "-t", "-c", str(conf), "-p", str(prefix)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_long_cluster_name_still_passes_nginx_t(tmp_path):
    """Variable names longer than nginx's default hash bucket allows fail `nginx -t`
    ("could not build variables_hash"): the cluster's name is shortened in them."""
    from ascendctl.render.proxy import render_site

    group_inventory(tmp_path, groups=2, per_group=1)
    path = tmp_path / "inv.yaml"
    names = ("h9r13531-758318", "qwen35-397b-a17b-w8a8-two-replicas-site-b")
    sites = []
    for index, name in enumerate(names):
        path.write_text(path.read_text().replace(
            "cluster: {name: " + (names[index - 1] if index else "t") + ",",
            f"cluster: {{name: {name},"))
        inv = load_inventory(path)
        assert inv.cluster.name == name
        sites.append(render_site(inv).decode())
        nginx_t(tmp_path / f"nginx{index}", sites[-1])
    # two clusters' sites on one gateway do not share a variable
    variables = [{w for w in site.split() if w.startswith("$ascendctl_")} for site in sites]
    assert variables[0] and not variables[0] & variables[1]


def test_the_lab_inventory_of_two_replicas(tmp_path):
    from ascendctl_lab import inventory

    nodes = [{"name": f"node{i}", "mgmt_ip": f"198.18.1.{11 + i}", "rank": i, "nic": "host0",
              "device_ips": [f"198.19.1.{11 + 8 * i + p}" for p in range(8)]} for i in range(2)]
    key = tmp_path / "api-key"
    for name in ("id", "kh"):
        (tmp_path / name).write_text("")
    data = inventory.build(name="t", chip="910B3", npus=8, roce_mtu=4200,
                           netmask="255.255.255.0", key=tmp_path / "id", known_hosts=tmp_path / "kh",
                           nodes=nodes, roce_gateway="198.19.1.1", model_dir=tmp_path / "model",
                           versions={"vllm": "0.32.0"}, engine="/opt/vllm/bin/vllm",
                           replicas=2, api_key_file=key)
    path = tmp_path / "lab.yaml"
    inventory.write(path, data)
    inv = load_inventory(path)
    assert [(g.name, g.hosts) for g in inv.serving_groups] == \
        [("replica0", ("node0",)), ("replica1", ("node1",))]
    assert [h.rank for h in inv.hosts] == [0, 0]
    assert inv.serving.pipeline_parallel_size == 1
    assert inv.serving.proxy.enabled and inv.gateway.name == "node0"
    assert inv.slo.quality is not None and inv.slo.quality.agree_with_previous
    # each engine keeps a CPU of its own across the lab
    assert [h.env["VLLM_CPU_OMP_THREADS_BIND"] for h in inv.hosts] == \
        [str(i % (os.cpu_count() or 1)) for i in range(2)]
    assert inv.serving.api_key is not None
    with pytest.raises(ValueError):
        inventory.build(name="t", chip="910B3", npus=8, roce_mtu=4200, netmask="x",
                        key=Path("k"), known_hosts=Path("kh"), nodes=nodes[:1] * 3,
                        roce_gateway="g", model_dir=Path("m"), versions={}, engine="v",
                        replicas=2)


def statuses(inv, raws: dict[str, dict | None]) -> list[NodeStatus]:
    nodes = []
    for host in inv.hosts:
        answer = raws.get(host.name)
        if answer is None:
            node = NodeStatus(name=host.name, rank=host.rank, reachable=False,
                              error="connect timed out after 10 s")
        else:
            node = node_status(host, answer, expect_npus=8, engine_units=[ENGINE])
        node.group = host.serving_group
        nodes.append(node)
    return nodes


def with_proxy(answer: dict, state: str = "running", active: str = "active") -> dict:
    answer["states"]["nginx.service"] = {**answer["states"][ENGINE], "active": active,
                                         "sub": state}
    return answer


@pytest.fixture()
def two_groups(tmp_path):
    return group_inventory(tmp_path, groups=2, per_group=1)


def healthy_raws() -> dict[str, dict]:
    return {"n0": with_proxy(raw(True)), "n1": raw(True)}


def test_the_service_is_healthy_only_when_every_group_is(two_groups):
    answers = healthy_raws()
    status = judge(two_groups, statuses(two_groups, answers), answers)
    assert status.verdict == Verdict.HEALTHY and status.reasons == []
    assert [(g.name, g.head, g.verdict) for g in status.groups] == \
        [("g0", "n0", Verdict.HEALTHY), ("g1", "n1", Verdict.HEALTHY)]
    assert status.proxy.node == "n0" and status.proxy.state.startswith("active")
    data = status.to_dict()
    assert [g["verdict"] for g in data["groups"]] == ["healthy", "healthy"]


def test_each_groups_envelope_is_the_one_its_head_reports(two_groups, tmp_path):
    from rich.console import Console

    from ascendctl.status.view import status_table
    from ascendctl_runtime import promotion_store
    from ascendctl_runtime.status_node import serving_envelope

    # the head's status answer: its serving release's newest passing envelope evidence
    root = tmp_path / "root"
    (root / "releases" / "r-1").mkdir(parents=True)
    for stamp, status, value in (("20261129T100000Z-0001", "pass", 16),
                                 ("20261129T110000Z-0002", "fail", 64)):
        promotion_store.store(str(root), "r-1", stamp, {"gate": "envelope", "status": status,
                                                        "envelope": value}, None, {})
    assert serving_envelope(str(root), "r-1") == 16
    assert serving_envelope(str(root), None) is None
    assert serving_envelope(str(root), "../bad") is None            # never fails the status
    answers = healthy_raws()
    answers["n1"]["envelope"] = serving_envelope(str(root), "r-1")
    answers["n0"]["envelope"] = True                                # not a number: none
    status = judge(two_groups, statuses(two_groups, answers), answers)
    assert [g.envelope for g in status.groups] == [None, 16]
    assert [g["envelope"] for g in status.to_dict()["groups"]] == [None, 16]
    console = Console(record=True, width=200, color_system=None)
    console.print(status_table(status))
    lines = [line for line in console.export_text().splitlines() if line.startswith("envelope")]
    assert lines == ["envelope (g1): 16 requests at once (the load envelope of r-1, measured "
                     "on n1)"]


def test_one_group_down_degrades_the_service_and_names_the_group(two_groups):
    answers = healthy_raws()
    answers["n1"]["probe"] = {"ok": False, "seconds": 5.0, "error": "timed out"}
    status = judge(two_groups, statuses(two_groups, answers), answers)
    assert [g.verdict for g in status.groups] == [Verdict.HEALTHY, Verdict.DOWN]
    assert status.verdict == Verdict.DEGRADED
    assert status.reasons[0] == "1 of 2 serving groups down (g1); g0 carry the traffic"
    assert all(r.startswith("serving group g1: ") for r in status.reasons[1:])
    assert status.reasons[1:]


def test_no_group_serving_or_the_proxy_down_is_down(two_groups):
    answers = healthy_raws()
    for name in ("n0", "n1"):
        answers[name]["probe"] = {"ok": False, "seconds": 5.0, "error": "timed out"}
    status = judge(two_groups, statuses(two_groups, answers), answers)
    assert status.verdict == Verdict.DOWN
    assert status.reasons[0] == "no serving group serves (g0, g1)"
    answers = healthy_raws()
    with_proxy(answers["n0"], state="failed", active="failed")
    status = judge(two_groups, statuses(two_groups, answers), answers)
    assert status.verdict == Verdict.DOWN
    assert status.reasons[0].startswith("the proxy on n0 (nginx, port 8080) is failed")


def test_the_bench_gate_is_one_round_that_fits_the_deployment(tmp_path):
    from ascendctl.benchmark.settings import validate
    from ascendctl.deploy.playbook_modules.bench_gate import gate_settings

    inv = group_inventory(tmp_path, groups=2, per_group=1, extra_vars=(
        "deploy: {rolling: {bench: true}}"))
    assert inv.deploy.rolling.bench
    settings = gate_settings(inv)
    assert (settings.concurrency, settings.prompts) == (8, 8)
    assert settings.input_len + settings.output_len <= inv.serving.max_model_len
    small = group_inventory(tmp_path, groups=2, per_group=1).serving.model_copy(
        update={"max_model_len": 256, "max_num_seqs": 4})
    tight = gate_settings(type("V", (), {"serving": small})())
    assert (tight.input_len, tight.output_len, tight.concurrency, tight.prompts) == \
        (128, 64, 4, 4)
    validate(settings, inv)     # refused settings would be exit 2 before anything ran
