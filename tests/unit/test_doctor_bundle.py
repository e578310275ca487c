"""The support bundle: every node's files under its name, a manifest with sizes and
hashes, the findings, a note for a node that could not be collected, and never the API
key - even when a node's text still held it, the controller's own copy is scrubbed."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from ascendctl.doctor.bundle import write_bundle
from ascendctl.doctor.collect import NodeCollection, parse_since
from ascendctl.doctor.scan import scan_collections
from ascendctl.doctor.signatures import default_signatures
from ascendctl.errors import InputError
from ascendctl.load import load_inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEY = "sk-test-" + "5e6f7a8b9c0d1e2f"
JOURNAL = "journal/ascendctl-engine.service.log"


def collections() -> list[NodeCollection]:
    text = (FIXTURES / "doctor" / "lab_engine_journal_node0.log").read_text()
    return [
        NodeCollection(node="node0", address="198.18.250.11", rank=0, ok=True,
                       hostname="node0", seconds=0.5,
                       files={JOURNAL: text + f"leaked by a buggy plugin: {KEY}\n",
                              "state/current.txt": "r-1\n"},
                       commands={JOURNAL: {"argv": ["journalctl", "-u", "x"], "rc": 0}}),
        NodeCollection(node="node1", address="198.18.250.12", rank=1, ok=False,
                       status="unreachable", error="connection refused"),
    ]


def test_bundle_holds_every_node_a_manifest_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", KEY)
    inv = load_inventory(FIXTURES / "inventories" / "good.yaml", check_files=False)
    cols = collections()
    findings = scan_collections({c.node: c.files for c in cols if c.ok}, default_signatures())
    out = tmp_path / "out" / "doctor.tar.gz"
    manifest = write_bundle(out, inv, cols, findings, since_s=3600)
    assert out.stat().st_mode & 0o777 == 0o640
    with tarfile.open(out) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    root = manifest["root"]
    assert set(members) == {f"{root}/manifest.json", f"{root}/findings.json",
                            f"{root}/node0/{JOURNAL}", f"{root}/node0/state/current.txt",
                            f"{root}/node1/NOT-COLLECTED.txt"}
    assert not any(KEY.encode() in blob for blob in members.values())
    assert b"leaked by a buggy plugin: [REDACTED]" in members[f"{root}/node0/{JOURNAL}"]
    assert members[f"{root}/node1/NOT-COLLECTED.txt"].startswith(b"node1 (198.18.250.12): "
                                                                  b"unreachable")
    stored = json.loads(members[f"{root}/manifest.json"])
    assert stored["cluster"] == "test" and stored["since_s"] == 3600
    listed = {f["path"]: f for node in stored["nodes"] for f in node["files"]}
    for path, entry in listed.items():
        blob = members[f"{root}/{path}"]
        assert entry["bytes"] == len(blob)
        assert entry["sha256"] == hashlib.sha256(blob).hexdigest()
    assert listed[f"node0/{JOURNAL}"]["command"] == ["journalctl", "-u", "x"]
    assert [n["status"] for n in stored["nodes"]] == ["ok", "unreachable"]
    ids = {f["id"] for f in json.loads(members[f"{root}/findings.json"])}
    assert {"DS-12", "DS-36", "DS-37"} <= ids


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("1h", 3600),
                                          ("2d", 172800), ("1w", 604800), ("45", 45)])
def test_since_durations(text, seconds):
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "0h", "1y", "-1h", "1.5h", "one hour"])
def test_bad_since_is_input_error(text):
    with pytest.raises(InputError, match="--since"):
        parse_since(text)
