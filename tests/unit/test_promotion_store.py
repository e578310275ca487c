"""Promotion evidence on the head (runtime promotion_store.py): where records and pages are
kept, the history event, what `list` and `envelope` read back, pruning, and ids refused.
Run directly and through the same stdin protocol the controller uses over SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin, shipped_with
from ascendctl_runtime import promotion_store as ps

OLD, NEW = "r-0000000000aa", "r-0000000000bb"
S1, S2, S3, S4 = ("20261129T100000Z-0001", "20261129T110000Z-0002", "20261129T120000Z-0003",
                  "20261129T130000Z-0004")


def call(op: str, **kwargs) -> dict:
    done = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                          input=call_stdin("promotion_store", {"op": op, "kwargs": kwargs}),
                          capture_output=True, timeout=60)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def make_root(tmp_path):
    root = tmp_path / "root"
    for release in (OLD, NEW):
        (root / "releases" / release).mkdir(parents=True)
    os.symlink(f"releases/{NEW}", root / "current")
    return root


def record(stamp: str, gate: str, status: str, envelope=None, release: str = NEW) -> dict:
    return {"release": release, "stamp": stamp, "time": "2026-11-29T10:00:00Z", "by": "ci",
            "node": "node0", "group": "g0", "gate": gate, "status": status,
            "summary": f"{gate} {status}", "previous": OLD, "envelope": envelope,
            "verdict": {"status": status}, "profile": {"concurrency": 4},
            "requests": {NEW: [{"i": 0, "start_s": 0.0, "e2e_ms": 12.5, "error": None}]}}


def put(root, stamp, gate, status, envelope=None, html=None, release=NEW):
    return ps.store(str(root), release, stamp, record(stamp, gate, status, envelope, release),
                    html, {"event": "promotion", "release": release, "gate": gate,
                           "status": status})


def test_store_writes_the_record_the_page_and_one_history_line(tmp_path):
    root = make_root(tmp_path)
    before = sorted(p.relative_to(root) for p in (root / "releases").rglob("*"))
    stored = put(root, S1, "long_tail", "fail", html="<!DOCTYPE html><p>é</p>")
    base = root / "promotion" / NEW
    assert stored == {"path": str(base / f"{S1}.json"), "html": str(base / f"{S1}.html")}
    text = (base / f"{S1}.json").read_text()
    assert json.loads(text) == record(S1, "long_tail", "fail")
    assert text == json.dumps(record(S1, "long_tail", "fail"), indent=1, sort_keys=True) + "\n"
    assert (base / f"{S1}.html").read_text(encoding="utf-8") == "<!DOCTYPE html><p>é</p>"
    # the release directory is untouched (its files decide whether a deploy changes)
    assert sorted(p.relative_to(root) for p in (root / "releases").rglob("*")) == before
    # no temporary file is left beside the record
    assert sorted(p.name for p in base.iterdir()) == [f"{S1}.html", f"{S1}.json"]
    history = [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]
    assert history == [{"event": "promotion", "release": NEW, "gate": "long_tail",
                        "status": "fail", "file": stored["path"]}]
    # without a page: none written, none named
    second = put(root, S2, "soak", "pass")
    assert second["html"] is None and not (base / f"{S2}.html").exists()
    assert len((root / "history.jsonl").read_text().splitlines()) == 2


def test_list_gives_summaries_oldest_first_and_skips_unreadable_records(tmp_path):
    root = make_root(tmp_path)
    put(root, S1, "regression", "pass", html="<p>1</p>")
    put(root, S2, "envelope", "pass", envelope=16)
    put(root, S3, "soak", "fail")
    put(root, S1, "regression", "fail", release=OLD)
    (root / "promotion" / NEW / "20261129T140000Z-0005.json").write_text("{not json")
    (root / "promotion" / NEW / "20261129T150000Z-0006.json").write_text("[1, 2]")
    (root / "promotion" / NEW / "notes.json").write_text("{}")      # not a stamp
    records = ps.list_records(str(root))["records"]
    assert sorted(records) == [OLD, NEW]
    assert [r["stamp"] for r in records[NEW]] == [S1, S2, S3]
    first = records[NEW][0]
    assert set(first) == set(ps.SUMMARY_KEYS) | {"file", "html"}
    assert first["gate"] == "regression" and first["status"] == "pass"
    assert first["html"] == str(root / "promotion" / NEW / f"{S1}.html")
    assert records[NEW][1]["html"] is None and records[NEW][1]["envelope"] == 16
    assert "requests" not in first and "verdict" not in first     # the bulk stays on disk
    assert [r["stamp"] for r in ps.list_records(str(root), per_release=2)["records"][NEW]] \
        == [S2, S3]


def test_list_latest_per_gate_keeps_the_newest_record_of_each_gate(tmp_path):
    root = make_root(tmp_path)
    put(root, S1, "regression", "fail")
    put(root, S2, "envelope", "pass", envelope=8)
    put(root, S3, "regression", "pass")
    put(root, S4, "long_tail", "pass")
    latest = ps.list_records(str(root), per_release=1, latest_per_gate=True)["records"][NEW]
    assert [(r["gate"], r["stamp"]) for r in latest] == \
        [("envelope", S2), ("regression", S3), ("long_tail", S4)]


def test_envelope_of_is_the_newest_passing_envelope(tmp_path):
    root = make_root(tmp_path)
    assert ps.envelope_of(str(root), NEW) is None                 # nothing stored yet
    put(root, S1, "envelope", "pass", envelope=8)
    put(root, S2, "envelope", "pass", envelope=16)
    put(root, S3, "envelope", "fail", envelope=32)                # a failed sweep: not trusted
    put(root, S4, "soak", "pass", envelope=64)                    # another gate
    assert ps.envelope_of(str(root), NEW) == 16
    assert ps.envelope_of(str(root), OLD) is None
    # through the node call, as `status` and the deploy ask for it
    assert call("envelope", root=str(root), release=NEW) == {"envelope": 16}


def test_records_of_pruned_releases_go_with_them(tmp_path):
    root = make_root(tmp_path)
    put(root, S1, "soak", "pass", release=OLD)
    gone = root / "promotion" / "r-gone00000000"
    gone.mkdir(parents=True)
    (gone / f"{S1}.json").write_text("{}")
    (root / "releases" / OLD).rmdir()                             # OLD was pruned
    put(root, S2, "soak", "pass")
    assert sorted(p.name for p in (root / "promotion").iterdir()) == [NEW]


def test_the_node_call_stores_and_lists(tmp_path):
    root = make_root(tmp_path)
    paths = [path for path, _source in shipped_with("promotion_store")]
    assert "ascendctl_runtime/promotion_store.py" in paths
    stored = call("store", root=str(root), release=NEW, stamp=S1,
                  record=record(S1, "envelope", "pass", 4), html="<p>x</p>",
                  event={"event": "promotion"})
    assert stored == {"path": f"{root}/promotion/{NEW}/{S1}.json",
                      "html": f"{root}/promotion/{NEW}/{S1}.html"}
    listed = call("list", root=str(root), latest_per_gate=True)["records"]
    assert [(r["gate"], r["envelope"], r["file"]) for r in listed[NEW]] == \
        [("envelope", 4, stored["path"])]


@pytest.mark.parametrize("release, stamp, message", [
    ("../../etc", S1, "bad release id"),
    ("", S1, "bad release id"),
    ("r/x", S1, "bad release id"),
    (NEW, "x; rm -rf /", "bad stamp"),
    (NEW, "../20261129T100000Z", "bad stamp"),
    (NEW, "20261129T100000Z-0001\n", "bad stamp"),
])
def test_bad_ids_and_stamps_are_refused(tmp_path, release, stamp, message):
    root = make_root(tmp_path)
    with pytest.raises(ValueError, match=message):
        ps.store(str(root), release, stamp, {}, None, {})
    answer = call("store", root=str(root), release=release, stamp=stamp, record={}, html=None,
                  event={})
    assert message in answer["error"]
    assert not (root / "history.jsonl").exists()
    assert not (root / "promotion").exists() or not any((root / "promotion").rglob("*.json"))
    with pytest.raises(ValueError, match="bad release id"):
        ps.envelope_of(str(root), "../x")
