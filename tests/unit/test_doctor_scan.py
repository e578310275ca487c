"""The scanner on real journals captured from the lab (tests/fixtures/doctor/) and real
hccn_tool output: one finding per signature and node with its count, ordered by time,
the earliest error marked as the probable root cause, nothing on a healthy start-up."""

from __future__ import annotations

from pathlib import Path

from ascendctl.doctor.scan import (
    compare_findings, order_findings, scan_collections, scan_texts, source_kind,
)
from ascendctl.doctor.signatures import default_signatures

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
JOURNAL = "journal/ascendctl-engine.service.log"


def journal(node: str) -> str:
    text = (FIXTURES / "doctor" / f"lab_engine_journal_{node}.log").read_text()
    return "".join(text.splitlines(keepends=True)[1:])    # without the `# source:` line


def by_id(findings):
    return {f.id: f for f in findings}


def test_head_journal_explains_port_taken_bad_flag_and_missing_weights():
    text = journal("node0")
    findings = order_findings(scan_texts("node0", {JOURNAL: text}, default_signatures()))
    found = by_id(findings)
    assert {"DS-12", "DS-36", "DS-37", "DS-26", "DS-30"} <= set(found)
    # counts are the matching lines, counted independently here
    assert found["DS-12"].count == text.count("Address already in use")
    assert found["DS-37"].count == text.count("Weight files referenced in index but missing")
    assert found["DS-36"].values == {"args": "--no-such-flag"}
    assert found["DS-26"].count == (text.count("EngineCore failed to start")
                                    + text.count("Engine core initialization failed"))
    assert found["DS-26"].umbrella and not found["DS-26"].root_cause
    # errors in the order they happened, the first is the probable root cause
    errors = [f.id for f in findings if f.severity == "error"]
    assert errors[:3] == ["DS-12", "DS-36", "DS-37"]
    assert found["DS-12"].root_cause and sum(f.root_cause for f in findings) == 1
    assert found["DS-12"].file == f"node0/{JOURNAL}"
    assert found["DS-12"].line.endswith("OSError: [Errno 98] Address already in use")
    assert found["DS-12"].first_seen == "2026-11-29T10:35:26.432237+0000"
    # a normal stop (status=143) is not counted as a crash
    crashes = [line for line in text.splitlines() if "Main process exited" in line
               and "status=143/" not in line]
    assert found["DS-30"].count == len(crashes) and found["DS-30"].severity == "warning"


def test_follower_journal_explains_the_unreachable_head_and_the_crashed_peer():
    text = journal("node1")
    found = by_id(scan_texts("node1", {JOURNAL: text}, default_signatures()))
    # the first matching line (TCPStore's retry) names the head; every alternative of a
    # regex reports its fields under the same names
    assert found["DS-11"].values == {"host": "198.18.2.11", "port": "29501"}
    assert found["DS-40"].values["peer"] == "198.18.2.11"
    assert found["DS-11"].distinct_lines >= 2 and found["DS-11"].count >= 3


def test_a_healthy_start_up_gives_no_finding():
    """The deploy's start of both ranks and their serving, up to the first stop."""
    for node in ("node0", "node1"):
        lines = journal(node).splitlines(keepends=True)
        end = next(i for i, line in enumerate(lines) if "Stopping ascendctl-engine" in line)
        healthy = "".join(lines[:end])
        assert "Application startup complete" in healthy or node == "node1"
        findings = scan_texts(node, {JOURNAL: healthy}, default_signatures())
        assert [f.id for f in findings if f.severity != "info"] == []


def test_across_nodes_the_earliest_error_is_the_root_cause():
    collections = {"node1": {JOURNAL: journal("node1")}, "node0": {JOURNAL: journal("node0")}}
    findings = scan_collections(collections, default_signatures())
    root = [f for f in findings if f.root_cause]
    assert [(f.id, f.node) for f in root] == [("DS-12", "node0")]
    dated = [f.first_seen for f in findings if f.severity == "error" and f.first_seen]
    assert dated == sorted(dated)
    assert {f.node for f in findings} == {"node0", "node1"}


def test_signatures_only_look_at_their_sources():
    assert source_kind("journal/x.log") == "journal"
    assert source_kind("npu/hccn-port-0.txt") == "npu"
    assert source_kind("state/history.jsonl") is None
    files = {
        # hccn_tool output belongs to npu/; the same words in a journal are not a port
        JOURNAL: "2026-11-29T10:00:00+0000 node0 x[1]: link status: DOWN\n",
        # a failure reason copied into history.jsonl must not count twice
        "state/history.jsonl": '{"reason": "OSError: [Errno 98] Address already in use"}\n',
        "npu/hccn-port-3.txt": "$ hccn_tool -i 3 -link -g   (exit 0)\nlink status: DOWN\n",
    }
    found = by_id(scan_texts("node0", files, default_signatures()))
    assert set(found) == {"DS-32"}
    assert found["DS-32"].file == "node0/npu/hccn-port-3.txt"


def tls_lines(values: list[int]) -> str:
    """`hccn_tool -i N -tls -g` lines in the format of the real capture
    (tests/fixtures/hccn_tool_a2_checks_mindie_doc.txt), one per port."""
    real = next(line for line in (FIXTURES / "hccn_tool_a2_checks_mindie_doc.txt")
                .read_text().splitlines() if line.startswith("dev_id:0, tls switch[0]"))
    return "".join(real.replace("dev_id:0", f"dev_id:{port}")
                   .replace("tls switch[0]", f"tls switch[{value}]") + "\n"
                   for port, value in enumerate(values))


def test_tls_switch_is_reported_only_when_it_differs():
    same = {"node0": {"npu/tls.txt": tls_lines([0] * 8)},
            "node1": {"npu/tls.txt": tls_lines([0] * 8)}}
    assert compare_findings(same, default_signatures()) == []
    differs = {"node0": {"npu/tls.txt": tls_lines([0] * 8)},
               "node1": {"npu/tls.txt": tls_lines([1] * 8)}}
    [finding] = compare_findings(differs, default_signatures())
    assert finding.id == "DS-34" and finding.count == 16
    assert "tls=0 on node0 (8 ports)" in finding.cause
    assert "tls=1 on node1 (8 ports)" in finding.cause
    one_port = {"node0": {"npu/tls.txt": tls_lines([0, 0, 0, 1, 0, 0, 0, 0])}}
    [finding] = compare_findings(one_port, default_signatures())
    assert finding.values == {"tls": "1"} and "dev_id:3" in finding.line
