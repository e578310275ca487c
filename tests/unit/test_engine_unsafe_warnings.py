"""Acknowledged unsafe container options are not silent: preflight's `engine.unsafe` warns
on every node and `ascendctl status` prints (and puts in --json) the options by name,
while the verdict stays what the cluster's health makes it."""

from __future__ import annotations

import io

import pytest

from ascendctl.checks import Severity, SPECS, Status, run_checks
from ascendctl.checks.expectations import EngineExpectation
from ascendctl.engine.preflight import engine_expectation
from ascendctl.exitcodes import Exit
from ascendctl.status import judge, node_status
from ascendctl.status.model import Verdict
from ascendctl.status.view import status_table
from tests.unit.test_checks_engine import no
from tests.unit.test_plan_inventories import make_inventory
from tests.unit.test_status_verdict import ENGINE, raw

UNSAFE = ("privileged", "cap-add:SYS_ADMIN", "mount:/etc/pki")


def container(data, *, unsafe: bool = True):
    variables = data["all"]["vars"]
    variables["serving"].pop("engine", None)
    variables["serving"]["proxy"]["enabled"] = False    # no nginx in the recorded answers
    variables["engine"] = {"kind": "container", "runtime": "podman",
                           "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1"}
    if unsafe:
        variables["engine"].update(
            options=["--privileged", "--cap-add=sys_admin"],
            mounts=[{"source": "/etc/pki", "target": "/etc/pki", "read_only": False}],
            allow_unsafe=list(UNSAFE))


@pytest.fixture()
def unsafe_inv(tmp_path):
    return make_inventory(tmp_path, container)


def check(engine: EngineExpectation, nodes: int = 2):
    facts = no.facts_of({f"node{i}": {**no.healthy_a2(i)} for i in range(nodes)})
    return run_checks(facts, no.expectations(nodes=nodes, engine=engine),
                      only=["engine.unsafe"])


def test_the_check_is_catalogued_as_a_warning():
    spec = SPECS["engine.unsafe"]
    assert spec.severity == Severity.WARN and spec.scope == "node"


def test_preflight_warns_on_every_node_naming_the_options(unsafe_inv):
    from ascendctl.preflight.expectations import build_expectations

    expectations = build_expectations(unsafe_inv, model_bytes=1)     # what preflight builds
    assert expectations.engine.unsafe == UNSAFE
    facts = no.facts_of({h.name: no.healthy_a2(h.rank) for h in unsafe_inv.hosts})
    results = run_checks(facts, expectations, only=["engine.unsafe"])
    assert [r.node for r in results] == ["node0", "node1"]
    for result in results:
        assert result.status == Status.WARN          # a warning, not a failure
        assert result.message == ("the engine runs with unsafe options acknowledged in "
                                  "engine.allow_unsafe: privileged, cap-add:SYS_ADMIN, "
                                  "mount:/etc/pki")
        assert "remove privileged, cap-add:SYS_ADMIN, mount:/etc/pki" in result.remediation
        assert result.to_dict()["status"] == "warn"


def test_preflight_passes_without_unsafe_options_and_skips_other_kinds(tmp_path):
    safe = make_inventory(tmp_path, lambda d: container(d, unsafe=False))
    (result,) = check(engine_expectation(safe), nodes=1)
    assert result.status == Status.PASS and result.remediation is None
    (host,) = check(EngineExpectation(kind="host", unsafe=UNSAFE), nodes=1)
    assert host.status == Status.SKIP


def statuses(inv):
    nodes, raws = [], {}
    for host in inv.hosts:
        raws[host.name] = raw(host.is_head)
        nodes.append(node_status(host, raws[host.name], expect_npus=8, engine_units=[ENGINE]))
    return judge(inv, nodes, raws)


def test_status_names_the_options_without_changing_the_verdict(unsafe_inv):
    status = statuses(unsafe_inv)
    assert status.verdict == Verdict.HEALTHY and status.exit_code == Exit.OK
    data = status.to_dict()
    assert data["unsafe_engine_options"] == list(UNSAFE)
    assert data["warnings"] == ["the engine runs with unsafe options acknowledged in "
                                "engine.allow_unsafe: privileged, cap-add:SYS_ADMIN, "
                                "mount:/etc/pki"]
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(status_table(status))
    lines = out.getvalue().splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: "))
    assert "privileged, cap-add:SYS_ADMIN, mount:/etc/pki" in lines[warning]
    assert lines[warning + 1].startswith("verdict: healthy")


def test_status_has_no_warning_without_unsafe_options(tmp_path):
    status = statuses(make_inventory(tmp_path, lambda d: container(d, unsafe=False)))
    assert status.warnings == [] and status.to_dict()["unsafe_engine_options"] == []
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(status_table(status))
    assert "warning:" not in out.getvalue()
