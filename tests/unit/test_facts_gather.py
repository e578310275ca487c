"""The one-round-trip gather script: built safely, run by real bash, split and parsed.

npu-smi and hccn_tool are the only simulated parts: stand-ins print captured output
(from tests/fixtures) for the arguments the script passes; every other command (ip, df,
ss, lscpu, python, date, getent) is the real one on this machine.
"""

import importlib.util
import os
import shlex
import stat
import subprocess
import time
from pathlib import Path

import pytest

from ascendctl.facts import (
    GatherOutputError,
    GatherParams,
    GatherParamsError,
    build_gather_script,
    parse_gather_output,
    plan_pings,
    split_sections,
)
from ascendctl.facts.chip import ChipFamily

_spec = importlib.util.spec_from_file_location(
    "node_outputs", Path(__file__).resolve().parents[1] / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)

PEER = no.device_ips(1)


def _args_for(section: str) -> str | None:
    parts = section.split(":")
    kind = parts[0]
    if kind == "npu_smi_info":
        return "npu-smi info"
    if kind == "npu_smi_topo":
        return "npu-smi info -t topo"
    if kind == "npu_smi_board":
        return f"npu-smi info -t board -i {parts[1]}"
    if kind == "npu_smi_board_chip":
        return f"npu-smi info -t board -i {parts[1]} -c {parts[2]}"
    if kind == "npu_smi_health":
        return f"npu-smi info -t health -i {parts[1]} -c {parts[2]}"
    if kind == "hccn":
        return f"hccn_tool -i {parts[2]} -{parts[1]} -g"
    return None


def _install_standins(root: Path, outputs: dict[str, str]) -> Path:
    """Stand-in npu-smi/hccn_tool printing the captured text for the exact arguments."""
    bindir = root / "bin"
    store = root / "outputs"
    bindir.mkdir()
    store.mkdir()
    for section, text in outputs.items():
        args = _args_for(section)
        if args:
            (store / args.replace(" ", "_")).write_text(text)
    for dev, ip in PEER.items():
        doc = no.fixture("hccn_tool_a2_checks_mindie_doc.txt")
        block = doc[doc.index(f"device {dev} PING"):]
        block = block[:block.index("packet loss") + len("packet loss")] + "\n"
        (store / f"hccn_tool_-i_{dev}_-ping_-g_address_{ip}").write_text(block.replace("11.12.165.80", ip))
    for tool in ("npu-smi", "hccn_tool"):
        script = bindir / tool
        script.write_text(
            "#!/bin/bash\n"
            f"f={shlex.quote(str(store))}/{tool}_$(echo \"$*\" | tr ' ' '_')\n"
            'if [ -f "$f" ]; then cat "$f"; else echo "Invalid card id."; echo "Error parameter of -i"; exit 2; fi\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    ascend = root / "Ascend"
    for sub, section in (("driver/version.info", "version:driver"), ("firmware/version.info", "version:firmware"),
                         ("ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", "version:toolkit")):
        path = ascend / sub
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(outputs[section])
    return bindir


def _run(script: str, bindir: Path) -> tuple[str, float, float]:
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    t0 = time.time()
    proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, env=env, timeout=120)
    t1 = time.time()
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, t0, t1


@pytest.fixture()
def standins(tmp_path):
    return tmp_path, _install_standins(tmp_path, no.healthy_a2(0))


def test_one_script_one_run_gives_every_fact(standins, tmp_path):
    root, bindir = standins
    params = GatherParams(ascend_root=str(root / "Ascend"), model_path=str(tmp_path / "models" / "qwen"),
                          probe_host="127.0.0.1", probe_ports=(1,), probe_timeout_s=1.0,
                          ping_targets=plan_pings(range(8), {"node1": PEER}), python="python3")
    out, t0, t1 = _run(build_gather_script(params), bindir)
    facts = parse_gather_output(out, host="node0", sent_at=t0, received_at=t1)
    assert facts.host == "node0"
    assert facts.chip.family == ChipFamily.A2_910B and facts.chip.model == "910B3"
    assert len(facts.npu_smi.chips) == 8 and facts.board.pci_device_id == 0xD802
    assert all(facts.health_of(n).status == "OK" for n in range(8))
    assert facts.topology.affinity_of(4) == frozenset(range(96, 120))
    assert [p.ip for p in facts.roce] == [f"11.12.165.{80 + i}" for i in range(8)]
    assert {p.link for p in facts.roce} == {"UP"} and {p.mtu for p in facts.roce} == {9000}
    assert {p.tls_enabled for p in facts.roce} == {False}
    assert {p.netdetect for p in facts.roce} == {"11.12.165.1"}
    assert [(pg.device, pg.target, pg.ok) for pg in facts.pings] == [(d, PEER[d], True) for d in range(8)]
    assert facts.driver.version == "25.3.rc1" and facts.firmware.version == "7.8.0.2.212"
    assert facts.toolkit.version == "8.5.1"
    assert facts.probes[0].host == "127.0.0.1" and facts.probes[0].result == "refused"
    # real host facts
    assert facts.disk.path == str(tmp_path) and facts.disk.available_bytes > 0
    assert facts.interface("lo") is not None and facts.numa is not None
    assert facts.python.python_version and facts.hostname.hostname == os.uname().nodename
    assert abs(facts.clock.offset_s) < 0.5 and facts.clock.uncertainty_s < 0.5
    assert "lspci" in facts.missing or facts.pci is not None


def test_hostile_parameters_stay_data(standins, tmp_path):
    root, bindir = standins
    marker = tmp_path / "pwned"
    evil = f"/tmp/m$(touch {marker})'; touch {marker}; '\"`touch {marker}`\""
    params = GatherParams(ascend_root=str(root / "Ascend") + f"$(touch {marker})", model_path=evil,
                          python=f"python3; touch {marker}")
    out, _, _ = _run(build_gather_script(params), bindir)
    assert not marker.exists()
    facts = parse_gather_output(out)
    assert facts.python is None and facts.problem("python")     # no such interpreter: reported
    assert facts.driver is None


@pytest.mark.parametrize("bad", [
    dict(ping_targets={0: ("10.0.0.1; reboot",)}),
    dict(ping_targets={9: ("10.0.0.1",)}),
    dict(probe_host="head node"),
    dict(probe_ports=(70000,), probe_host="10.0.0.1"),
    dict(listen_ports=(0,)),
    dict(npu_count=0),
    dict(chips_per_npu=3),
    dict(path_mtu=100000),
])
def test_rejected_parameters(bad):
    with pytest.raises((GatherParamsError, ValueError)):
        build_gather_script(GatherParams(**bad))


def test_script_is_valid_bash_and_a3_aware():
    script = build_gather_script(GatherParams(npu_count=8, chips_per_npu=2, extended=True,
                                              ping_targets={15: ("10.0.1.15",)}, path_mtu=9000))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "-t health -i 7 -c 1" in script and "-i 15 -mtu -g" in script
    assert "-t usages -i 3" in script and "-i 0 -optical -g" in script
    assert "ping -M do -s 8972" in script


def test_plan_pings():
    peers = {"b": {0: "10.0.1.10", 1: "10.0.1.11"}, "c": {0: "10.0.2.10", 1: "10.0.2.11"}}
    assert plan_pings([0, 1], peers) == {0: ("10.0.1.10", "10.0.2.10"), 1: ("10.0.1.11", "10.0.2.11")}
    assert plan_pings([0], peers, all_ports=True) == {0: ("10.0.1.10", "10.0.1.11", "10.0.2.10", "10.0.2.11")}


def test_split_rejects_foreign_and_truncated_output(standins):
    root, bindir = standins
    out, _, _ = _run(build_gather_script(GatherParams(ascend_root=str(root / "Ascend"))), bindir)
    sections = split_sections(out)
    assert sections["npu_smi_info"].rc == 0 and "910B3" in sections["npu_smi_info"].stdout
    # a card that does not exist: the stand-in's error goes to stdout with rc 2, kept apart
    assert "hccn:ip:0" in sections and sections["install_info"].rc != 0
    with pytest.raises(GatherOutputError):
        split_sections("Welcome to the jump host\n")
    with pytest.raises(GatherOutputError):
        split_sections(out[: out.index("BEGIN clock_end")])


def test_stderr_and_exit_codes_are_kept_apart():
    n = "0123456789abcdef"
    text = (f"@@ASCENDCTL-GATHER v1 {n}\n@@{n} BEGIN npu_smi_info\n\n@@{n} STDERR npu_smi_info\n"
            f"dcmi module initialize failed. ret is -8005\n@@{n} END npu_smi_info rc=255\n"
            f"@@{n} BEGIN clock_start\n1767225600.5\n\n@@{n} STDERR clock_start\n\n@@{n} END clock_start rc=0\n"
            f"@@{n} BEGIN clock_end\n1767225601.5\n\n@@{n} STDERR clock_end\n\n@@{n} END clock_end rc=0\n")
    facts = parse_gather_output(text, sent_at=1767225600.0, received_at=1767225602.0)
    assert facts.npu_smi.error_code == -8005 and not facts.npu_smi.ok
    assert facts.clock.offset_s == 0.0 and facts.clock.uncertainty_s == 0.5


def test_node_facts_serialise_to_json():
    import json

    facts = no.facts_of({"node0": no.healthy_a2(0)})["node0"]
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["chip"]["family"] == "910B" and data["chip"]["model"] == "910B3"
    assert data["roce"][3]["ip"] == "11.12.165.83" and data["roce"][3]["mtu"] == 9000
    assert data["topology"]["devices"][0]["cpu_affinity"][:2] == [144, 145]
    assert data["driver"]["compatible_fw"] == ["[7.0.0,8.9.9]"]           # as the version file writes it
