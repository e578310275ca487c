"""The worked example of docs/extending.md: the `numa_balancing` fact, its captures and the
`host.numa_balancing` check over it; and the doc itself, whose code is the repository's."""

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from ascendctl.checks import Status, run_checks
from ascendctl.facts import GatherParams, build_gather_script, parse_gather_output

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "facts" / "numa_balancing"
DOC = ROOT / "docs" / "extending.md"

_spec = importlib.util.spec_from_file_location("node_outputs", ROOT / "tests" / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)


def captured(case: str) -> str:
    """A capture of tests/facts/numa_balancing/, without its `# source:` line."""
    return (CASES / f"{case}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def verdict(numa_balancing: str | None, numa_sysfs: str = no.NUMA_SYSFS):
    """host.numa_balancing on a healthy A2 node (8 NUMA nodes unless told otherwise)."""
    node = no.healthy_a2(0)
    node["numa_sysfs"] = numa_sysfs
    if numa_balancing is not None:
        node["numa_balancing"] = numa_balancing
    (result,) = run_checks(no.facts_of({"node0": node}), no.expectations(nodes=1), only=["host.numa_balancing"])
    return result


@pytest.mark.parametrize("case,status", [("on", Status.WARN), ("lab_node_off", Status.PASS), ("absent", Status.PASS)])
def test_verdict_on_a_host_with_eight_numa_nodes(case, status):
    assert verdict(captured(case)).status == status


def test_warning_names_the_setting_and_how_to_turn_it_off():
    r = verdict(captured("on"))
    assert r.message == ("kernel.numa_balancing=1 on 8 NUMA nodes: the kernel migrates the ranks' pages away "
                         "from their CPU binding")
    assert r.remediation.startswith("sysctl -w kernel.numa_balancing=0;")


def test_one_numa_node_has_nothing_to_migrate():
    r = verdict(captured("on"), numa_sysfs="node0 0-191\n")
    assert r.status == Status.PASS and "one NUMA node" in r.message


def test_not_gathered_or_unreadable_skips():
    assert verdict(None).status == Status.SKIP
    r = verdict("cat: /proc/sys/kernel/numa_balancing: Permission denied\n")
    assert r.status == Status.SKIP and "unparseable output" in r.message


def test_the_gather_script_reads_this_machines_kernel():
    script = build_gather_script(GatherParams())
    proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=120)
    facts = parse_gather_output(proc.stdout)
    path = Path("/proc/sys/kernel/numa_balancing")
    expected = int(path.read_text()) if path.exists() else None
    assert facts.numa_balancing.mode == expected and facts.problem("numa_balancing") is None


# --- the doc ----------------------------------------------------------------------------

BLOCK = re.compile(r"^```(?P<lang>\w+) (?P<path>\S+)(?P<excerpt> \(excerpt\))?\n(?P<body>.*?)^```$",
                   re.MULTILINE | re.DOTALL)


def doc_blocks() -> list[re.Match]:
    return list(BLOCK.finditer(DOC.read_text(encoding="utf-8")))


def test_the_docs_code_is_the_repositorys():
    blocks = doc_blocks()
    assert {m["path"] for m in blocks} >= {
        "ascendctl/facts/kernel.py", "ascendctl/checks/kernel.py", "tests/facts/numa_balancing/on.txt",
        "tests/facts/numa_balancing/on.json", "tests/unit/test_checks_kernel.py"}
    for m in blocks:
        text = (ROOT / m["path"]).read_text(encoding="utf-8")
        if m["excerpt"]:
            assert m["body"] in text, f"docs/extending.md: the excerpt of {m['path']} is not in that file"
        else:
            assert m["body"] == text, f"docs/extending.md: {m['path']} differs from the file"


def test_the_example_touches_one_fact_module_and_one_check_module():
    mentions = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ascendctl").rglob("*.py")
                      if "numa_balancing" in p.read_text(encoding="utf-8"))
    assert mentions == ["ascendctl/checks/kernel.py", "ascendctl/facts/kernel.py"]
    assert sorted(p.name for p in CASES.iterdir()) == [
        "absent.json", "absent.txt", "lab_node_off.json", "lab_node_off.txt", "on.json", "on.txt"]
