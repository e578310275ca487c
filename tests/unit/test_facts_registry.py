"""The fact registry and NodeFacts: every fact in one place, found without wiring; the
gather script composed from the facts; values, problems and missing commands per fact."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from ascendctl.facts import (
    Derived,
    Fact,
    GatherParams,
    KeyedFact,
    Reading,
    Section,
    all_facts,
    build_gather_script,
    fact_named,
    facts_from_outputs,
)
from ascendctl.facts.hccn import HCCN_PING, ROCE
from ascendctl.facts.npu_smi import NPU_SMI, NpuSmiInfo
from ascendctl.facts.registry import check_registry
from ascendctl.facts.system import LISTENING, NUMA

_spec = importlib.util.spec_from_file_location(
    "node_outputs", Path(__file__).resolve().parents[1] / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)


def jobs(script: str) -> list[str]:
    """The section names the script starts, in order."""
    import shlex

    body = script[script.index("\nthrottle; run ") + 1:script.index("\nwait\n")]
    return [shlex.split(chunk.removeprefix("throttle; run "))[0] for chunk in body.split("\nthrottle; run ")]


def test_every_fact_is_registered_once_and_defined_in_its_module():
    facts = all_facts()
    assert len({f.name for f in facts}) == len(facts) >= 50
    for f in facts:
        assert f.module.startswith("ascendctl.facts."), f
        assert getattr(importlib.import_module(f.module), next(
            k for k, v in vars(importlib.import_module(f.module)).items() if v is f)) is f
    assert fact_named("npu_smi") is NPU_SMI
    with pytest.raises(KeyError):
        fact_named("no_such_fact")


def test_the_registry_refuses_clashing_names_and_sections():
    a = Fact("a_fact", command="true", parse=str)
    with pytest.raises(ValueError, match="taken"):
        check_registry([a, Fact("a_fact", command="false", parse=str, section="other")])
    with pytest.raises(ValueError, match="claim section"):
        check_registry([a, Fact("b_fact", command="false", parse=str, section="a_fact")])
    keyed = KeyedFact("c_fact", section="hccn:x", keys=lambda p: (0,), command=lambda k, p: "true", parse=str)
    with pytest.raises(ValueError, match="claim section"):
        check_registry([keyed, Fact("d_fact", command="true", parse=str, section="hccn:x:0")])
    with pytest.raises(ValueError, match="taken"):
        check_registry([Fact("problems", command="true", parse=str)])


def test_the_gather_script_runs_exactly_the_registered_commands():
    params = GatherParams(extended=True, model_path="/data/m", probe_host="198.18.0.11", probe_ports=(8000,),
                          ping_targets={0: ("198.19.0.12",)}, path_mtu=9000)
    expected = [section for f in all_facts() for section, _ in f.commands(params)]
    started = jobs(build_gather_script(params))
    assert started == expected and len(started) == len(set(started))
    assert {"npu_smi_info", "hccn:link:7", "hccn:optical:0", "npu_smi_health:7:0", "npu_smi_memory:3", "df",
            "probes", "ping:0:198.19.0.12", "dfping:0:198.19.0.12", "numa_balancing"} <= set(started)
    # without the parameters that call for them, their commands are left out
    plain = set(jobs(build_gather_script(GatherParams())))
    assert not plain & {"df", "probes", "hccn:optical:0", "npu_smi_memory:3"}
    assert not any(s.startswith(("ping:", "dfping:")) for s in plain)


def test_the_ping_round_runs_only_the_ping_facts():
    params = GatherParams(ping_targets={0: ("198.19.0.12",), 3: ("198.19.0.15", "198.19.1.15")},
                          path_mtu=4200, pings_only=True)
    started = jobs(build_gather_script(params))
    assert sorted(started) == sorted(["ping:0:198.19.0.12", "ping:3:198.19.0.15", "ping:3:198.19.1.15",
                                      "dfping:0:198.19.0.12", "dfping:3:198.19.0.15", "dfping:3:198.19.1.15"])
    assert {f.name for f in all_facts() if getattr(f, "ping_round", False)} == {"hccn_ping", "dfping"}


def test_keyed_sections_round_trip_their_keys():
    assert HCCN_PING.section_of((3, "fe80::1")) == "ping:3:fe80::1"
    assert HCCN_PING.key_of("ping:3:fe80::1") == (3, "fe80::1")
    assert HCCN_PING.key_of("dfping:3:10.0.0.1") is None and HCCN_PING.key_of("ping:3") is None
    health = fact_named("npu_smi_health")
    assert health.key_of("npu_smi_health:12:1") == (12, 1) and health.section_of((12, 1)) == "npu_smi_health:12:1"
    link = fact_named("hccn_link")
    assert link.key_of("hccn:link:15") == 15 and link.key_of("hccn:link_stat:15") is None


def test_typed_access_and_attribute_access_agree():
    facts = no.facts_of({"node0": no.healthy_a2(0)})["node0"]
    info = facts[NPU_SMI]
    assert isinstance(info, NpuSmiInfo) and info is facts.npu_smi and len(info.chips) == 8
    assert facts[ROCE] is facts.roce and len(facts[ROCE]) == 8
    assert facts[NUMA].node_of_cpu(30) == 1 and facts[LISTENING][0].process == "sshd"
    with pytest.raises(KeyError, match="not a registered fact"):
        facts[Fact("unregistered", command="true", parse=str)]
    with pytest.raises(AttributeError):
        facts.no_such_fact
    with pytest.raises(AttributeError):
        facts.npu_smi = None
    assert facts == no.facts_of({"node0": no.healthy_a2(0)})["node0"]


def test_to_dict_lists_the_listed_facts_only():
    data = json.loads(json.dumps(no.facts_of({"node0": no.healthy_a2(0)})["node0"].to_dict()))
    listed = [f.name for f in all_facts() if f.listed]
    assert list(data) == ["host", *listed, "problems", "missing"]
    assert "hccn_link" not in data and "ip_addr" not in data       # inputs of roce / interfaces
    assert data["health"][7][:2] == [7, 0] and data["health"][7][2]["status"] == "OK"


def test_problems_and_missing_commands_are_noted_per_section():
    o = no.healthy_a2(0)
    o["lspci"] = ("", "bash: lspci: command not found\n", 127)
    o["ip_addr"] = "Object \"addr\" is unknown\n"
    o["df"] = ("", "df: /data: No such file or directory\n", 1)
    o["numa_sysfs"] = ""                                   # no NUMA in sysfs: lscpu is read instead
    o["lscpu"] = '{"lscpu": [{"field": "NUMA node0 CPU(s):", "data": "0-3"}, ' \
                 '{"field": "On-line CPU(s) list:", "data": "0-3"}]}'
    facts = facts_from_outputs(o, host="n")
    assert facts.pci is None and "lspci" in facts.missing
    assert facts.problem("lspci").startswith("lspci: command not found (rc=127)")
    assert facts.interfaces == () and "unparseable output" in facts.problem("ip_addr")
    assert facts.disk is None and facts.problem("df") == "df: rc=1: df: /data: No such file or directory"
    assert facts.numa.cpus_of(0) == frozenset(range(4)) and facts.problem("numa_sysfs") is None


def test_facts_no_listed_fact_reads_are_parsed_quietly():
    o = no.healthy_a2(0)
    o["numa_sysfs"] = no.NUMA_SYSFS
    o["lscpu"] = ("", "lscpu: invalid option -- 'J'\n", 1)        # unread: sysfs had the answer
    o["hccn:optical:0"] = ("", "bash: hccn_tool: command not found\n", 127)
    o["ping:0:11.12.165.90"] = ("", "", 124)                       # a timeout is an answer
    facts = facts_from_outputs(o)
    assert facts.problems == () and facts.missing == ()
    assert facts.pings[0].detail == "timed out" and not facts.pings[0].ok


def test_derived_facts_compute_from_a_reading():
    seen = []
    double = Derived("double_mtu", lambda r: [seen.append(1), 2 * (r[fact_named("hccn_mtu")][0][1])][1])
    reading = Reading({"hccn:mtu:0": Section("hccn:mtu:0", "mtu:4200\n", "", 0)})
    assert reading[double] == 8400 and reading[double] == 8400 and seen == [1]     # computed once
    loop = Derived("loop", lambda r: r[loop])
    with pytest.raises(RuntimeError, match="depends on itself"):
        Reading({})[loop]


def test_facts_modules_import_with_the_standard_library_alone(tmp_path):
    import shutil
    import sys

    package = Path(importlib.import_module("ascendctl.facts").__file__).parent
    target = tmp_path / "ascendctl" / "facts"
    target.mkdir(parents=True)
    (tmp_path / "ascendctl" / "__init__.py").write_text("")
    for path in package.glob("*.py"):
        shutil.copy(path, target / path.name)
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from ascendctl.facts import all_facts, build_gather_script, GatherParams\n"
            "import ascendctl.facts.npu_smi, ascendctl.facts.hccn\n"
            "print(len(all_facts()), len(build_gather_script(GatherParams())) > 0)\n"
            "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules}"
            " - set(sys.stdlib_module_names) - {'__main__'})))")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code, str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == f"{len(all_facts())} True"
    assert json.loads(out[1]) == ["ascendctl"]
