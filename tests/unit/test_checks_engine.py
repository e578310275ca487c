"""The engine checks (ascendctl/checks/engine.py) through the real runner, on a healthy
captured A2 node with the engine facts of tests/facts/ (captured on lab nodes, or
constructed as their `# source:` lines say), and the version checks' view of a container
or venv engine."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from ascendctl.checks import Status, run_checks
from ascendctl.checks.expectations import EngineExpectation
from ascendctl.engine.kinds.container import ContainerKind
from ascendctl.engine.kinds.venv import wheelhouse_packages
from ascendctl.facts.engine import image_cann_from_files, split_file_blocks

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "facts"

_spec = importlib.util.spec_from_file_location("node_outputs", ROOT / "tests" / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)

IMAGE = "localhost/ascendctl-lab/vllm-cpu:v1"
IMAGE_ID = "sha256:89aaa24b6b201a52dc85f63c812972533a0c3eb953f426a2b9ab8269395bcefc"
CONTAINER = EngineExpectation(kind="container", runtime="podman", image=IMAGE,
                              stack_from=ContainerKind.stack_from)


def captured(fact: str, case: str) -> str:
    return (CASES / fact / f"{case}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def node(**sections: str) -> dict[str, str]:
    out = no.healthy_a2(0)
    out.update(sections)
    return out


def result(check: str, outputs: dict[str, str], engine: EngineExpectation = CONTAINER, **exp):
    (found,) = run_checks(no.facts_of({"node0": outputs}),
                          no.expectations(nodes=1, engine=engine, **exp), only=[check])
    return found


@pytest.mark.parametrize("case,status", [("podman_4.3.1_lab", Status.PASS),
                                         ("docker_no_daemon", Status.FAIL),
                                         ("absent", Status.FAIL)])
def test_runtime(case, status):
    r = result("engine.runtime", node(engine_runtime=captured("engine_runtime", case)))
    assert r.status == status
    if case == "docker_no_daemon":
        assert "Cannot connect to the Docker daemon" in r.message
        assert r.remediation == "systemctl enable --now docker"


def test_runtime_skips_for_a_host_engine():
    r = result("engine.runtime", node(), EngineExpectation())
    assert r.status == Status.SKIP


def test_image_missing_without_an_archive_is_refused():
    r = result("engine.image", node(engine_images=captured("engine_images", "lab_absent")),
               replace(CONTAINER, image="localhost/ascendctl-lab/vllm-cpu:v9"))
    assert r.status == Status.FAIL
    assert r.message == ("localhost/ascendctl-lab/vllm-cpu:v9 is not on this node and the "
                         "inventory gives no engine.archive")
    present = result("engine.image", node(engine_images=captured("engine_images", "lab_present")))
    assert present.status == Status.PASS and "89aaa24b6b20" in present.message


def test_image_differing_between_nodes_fails_on_each():
    other = captured("engine_images", "lab_present").replace("89aaa24b6b20", "0123456789ab")
    facts = no.facts_of({"node0": node(engine_images=captured("engine_images", "lab_present")),
                         "node1": {**no.healthy_a2(1), "engine_images": other}})
    results = {r.node: r for r in run_checks(facts, no.expectations(nodes=2, engine=CONTAINER),
                                             only=["engine.image"])}
    assert results["node0"].status == results["node1"].status == Status.FAIL
    assert "0123456789ab on node1" in results["node0"].message


def test_an_archive_brings_the_image_or_is_reported_unreadable():
    archive = replace(CONTAINER, archive="/srv/img.tar", archive_image_id=IMAGE_ID)
    r = result("engine.image", node(engine_images=captured("engine_images", "lab_absent")), archive)
    assert r.status == Status.PASS and r.message.endswith("loaded from the archive by deploy")
    broken = replace(archive, archive_image_id=None,
                     archive_error="/srv/img.tar: image archive is truncated")
    assert result("engine.image", node(), broken).status == Status.FAIL


def test_image_cann_against_the_driver():
    cann = captured("engine_image_cann", "lab_cann_8.5.1")
    ok = result("engine.image_cann", node(engine_image_cann=cann))
    assert ok.status == Status.PASS
    assert ok.message == "the image's CANN 8.5.1 accepts driver 25.3.rc1 (V100R001C23)"
    # a toolkit that does not list the driver's Innerversion (C23)
    old = cann.replace("[V100R001C22],[V100R001C23],[V100R001C25]", "[V100R001C25]")
    bad = result("engine.image_cann", node(engine_image_cann=old))
    assert bad.status == Status.FAIL
    assert "does not list driver 25.3.rc1 (V100R001C23)" in bad.message
    pinned = result("engine.image_cann", node(engine_image_cann=cann),
                    versions=no.expectations().versions.__class__(cann="9.1.0"))
    assert pinned.status == Status.FAIL and "pinned versions.cann 9.1.0" in pinned.message


def test_image_cann_from_the_archive_before_the_image_is_loaded():
    files = split_file_blocks(captured("engine_image_cann", "lab_cann_8.5.1").split("\n", 1)[1])
    archive = replace(CONTAINER, archive="/srv/img.tar", archive_image_id=IMAGE_ID,
                      archive_cann=image_cann_from_files(files, "/srv/img.tar"))
    r = result("engine.image_cann", node(), archive)
    assert r.status == Status.PASS and r.message.startswith("the archive's CANN 8.5.1")


def test_image_cann_newer_hdk_than_the_driver():
    cann = captured("engine_image_cann", "lab_cann_8.5.1").replace("8.5.1", "9.1.0")
    r = result("engine.image_cann", node(engine_image_cann=cann))
    assert r.status == Status.FAIL
    assert "validated with HDK 26.0.RC1 or newer (vllm-ascend 0.23.0, 0.23.0.post1); the driver is 25.3.rc1" \
        in r.message


def test_image_without_cann_warns():
    r = result("engine.image_cann", node(engine_image_cann=captured("engine_image_cann", "no_toolkit")))
    assert r.status == Status.WARN


def test_npu_holders_names_the_leftover_and_allows_our_own():
    holders = captured("npu_holders", "leftover_and_own")
    r = result("engine.npu_holders", node(npu_holders=holders))
    assert r.status == Status.FAIL
    assert r.message == "pid 2312 (python3, vllm-old.service) has davinci0 davinci_manager open"
    assert r.remediation == "systemctl stop vllm-old.service"
    strict = result("engine.npu_holders", node(npu_holders=holders),
                    replace(CONTAINER, allow_own=False))
    assert "pid 3001 (VllmWorker-0, ascendctl-engine.service)" in strict.message


def test_npu_holders_names_another_container_but_not_ours():
    squatter = captured("engine_containers", "lab_squatter")
    none = captured("npu_holders", "lab_none")
    r = result("engine.npu_holders", node(npu_holders=none, engine_containers=squatter))
    assert r.status == Status.FAIL
    assert r.message == ("container squatter (localhost/ascendctl-lab/vllm-cpu:v1) is given "
                         "davinci1 davinci_manager")
    assert r.remediation == "podman stop squatter"
    ours = squatter.replace('"Name": "squatter"', '"Name": "ascendctl-engine"')
    assert result("engine.npu_holders", node(npu_holders=none, engine_containers=ours)).status \
        == Status.PASS


def test_hdk_of_the_host_engines_release_set():
    newer = node(python=no.python_packages("0.23.0"))
    r = result("engine.hdk", newer, EngineExpectation())
    assert r.status == Status.FAIL
    assert r.message == "driver 25.3.rc1 is older than HDK 26.0.RC1, which vllm-ascend 0.23.0 was validated with"
    unverified = result("engine.hdk", node(), EngineExpectation())      # 0.18.0: HDK unverified
    assert unverified.status == Status.SKIP
    venv = result("engine.hdk", node(), EngineExpectation(kind="venv", packages=wheelhouse_packages({
        "vllm_ascend": "0.23.0", "vllm": "0.23.0"})))
    assert venv.status == Status.FAIL


def test_container_engine_skips_the_hosts_cann_and_python_stack():
    bare = node(python="python=3.11.2\nexecutable=/usr/bin/python3\n")
    for check in ("versions.python_stack", "versions.python", "versions.cann_present",
                  "versions.cann_driver"):
        r = result(check, bare)
        assert r.status == Status.SKIP and "engine.image_cann" in r.message, check
    host = result("versions.python_stack", bare, EngineExpectation())
    assert host.status == Status.FAIL


def test_venv_engine_reads_the_wheelhouse_packages():
    bare = node(python="python=3.11.2\nexecutable=/usr/bin/python3\n")
    wheels = EngineExpectation(kind="venv", packages=wheelhouse_packages({
        "torch": "2.9.0", "torch_npu": "2.9.0.post1", "vllm": "0.18.0", "vllm_ascend": "0.18.0"}))
    assert result("versions.python_stack", bare, wheels).status == Status.PASS
    lacking = replace(wheels, packages=wheelhouse_packages({"torch": "2.9.0"}))
    r = result("versions.python_stack", bare, lacking)
    assert r.status == Status.FAIL and r.message.startswith("the wheelhouse has no wheel of: ")
