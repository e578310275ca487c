"""`ascendctl history`'s promotion evidence: read from each group head's promotion store
(the real node call, run on this machine), merged across heads, and shown in the release
table, in the evidence table and in --json."""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console

from ascendctl.deploy.history import (
    _promotion_records, evidence_where, history_table, latest_per_gate, promotion_cell, promotion_table,
)
from ascendctl.transport import local_pool
from ascendctl_runtime import promotion_store
from tests.unit.test_playbook_rolling import group_inventory

NEW, OLD = "r-0000000000bb", "r-0000000000aa"


def summary(gate, status, stamp, envelope=None, head="n0", **extra):
    return {"release": NEW, "gate": gate, "status": status, "stamp": stamp,
            "time": "2026-11-29T10:00:00Z", "summary": f"{gate} {status}", "envelope": envelope,
            "head": head, "file": f"/var/lib/ascendctl/promotion/{NEW}/{stamp}.json",
            "html": f"/var/lib/ascendctl/promotion/{NEW}/{stamp}.html", **extra}


def test_a_failure_on_any_head_wins_else_the_newest():
    chosen = latest_per_gate([
        summary("envelope", "pass", "20261129T100000Z-0001", 8),
        summary("regression", "pass", "20261129T120000Z-0002", head="n2"),
        summary("regression", "fail", "20261129T110000Z-0003"),
        summary("envelope", "pass", "20261129T130000Z-0004", 16, head="n2"),
        summary("long_tail", "pass", "20261129T090000Z-0005"),
    ])
    assert list(chosen) == ["regression", "long_tail", "envelope"]      # the gates' order
    assert chosen["regression"]["status"] == "fail"
    assert (chosen["envelope"]["envelope"], chosen["envelope"]["head"]) == (16, "n2")
    assert promotion_cell(chosen) == "regression fail, long_tail pass, envelope pass (16)"
    assert promotion_cell(None) == ""
    assert evidence_where(chosen["long_tail"]) == \
        f"n0:/var/lib/ascendctl/promotion/{NEW}/20261129T090000Z-0005.{{json,html}}"
    assert evidence_where({**chosen["long_tail"], "html": None}) == \
        f"n0:/var/lib/ascendctl/promotion/{NEW}/20261129T090000Z-0005.json"


def test_history_reads_each_heads_store_through_the_node_call(tmp_path):
    root = tmp_path / "root"
    (root / "releases" / NEW).mkdir(parents=True)
    inv = group_inventory(tmp_path, groups=2, per_group=1, extra_vars=(
        f"deploy: {{root: {root}, python: {sys.executable}}}"))
    for stamp, gate, status, envelope in (("20261129T100000Z-0001", "regression", "fail", None),
                                          ("20261129T110000Z-0002", "regression", "pass", None),
                                          ("20261129T120000Z-0003", "envelope", "pass", 12)):
        promotion_store.store(str(root), NEW, stamp,
                              {"release": NEW, "stamp": stamp, "gate": gate, "status": status,
                               "summary": f"{gate} {status}", "envelope": envelope,
                               "requests": {NEW: []}},
                              "<p>page</p>" if gate == "envelope" else None,
                              {"event": "promotion"})
    with local_pool(["n0", "n1"]) as pool:
        pool.conn("n1").close()                 # the second head does not answer: skipped
        found = _promotion_records(inv, pool)
    assert list(found) == [NEW]
    gates = found[NEW]
    assert list(gates) == ["regression", "envelope"]
    # the newest regression run on that head is the pass (a head's latest per gate)
    assert gates["regression"]["status"] == "pass" and gates["regression"]["html"] is None
    assert gates["envelope"]["envelope"] == 12 and gates["envelope"]["head"] == "n0"
    assert gates["envelope"]["html"] == f"{root}/promotion/{NEW}/20261129T120000Z-0003.html"
    assert os.path.isfile(gates["envelope"]["file"])
    assert "requests" not in gates["envelope"]


def data(promotion):
    entry = {"id": NEW, "revision": 2, "status": "active", "created": "2026-11-29T09:00:00Z",
             "by": "ci", "current_on": ["n0"], "nodes": ["n0"], "summary": {}}
    if promotion is not None:
        entry["promotion"] = promotion
    return {"cluster": "t", "releases": [entry], "current": {"n0": NEW}, "consistent": True,
            "unreachable": {}, "maintenance": {}, "events": [], "groups": {}}


def rendered(renderable, width: int = 250) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_tables_show_each_gate_and_where_its_evidence_is():
    gates = latest_per_gate([summary("regression", "pass", "20261129T100000Z-0001"),
                             summary("envelope", "pass", "20261129T110000Z-0002", 16)])
    text = rendered(history_table(data(gates)))
    assert "promotion" in text and "regression pass, envelope pass (16)" in text
    evidence = rendered(promotion_table(data(gates))).splitlines()
    row = next(i for i, line in enumerate(evidence) if "│ envelope " in line)
    assert [cell.strip() for cell in evidence[row].strip("│").split("│")] == \
        [NEW, "envelope", "pass", "16", "2026-11-29T10:00", "envelope pass"]
    # under the summary: the record and its page on the head that keeps them
    assert evidence[row + 1].split("│")[-2].strip() == \
        f"n0:/var/lib/ascendctl/promotion/{NEW}/20261129T110000Z-0002.{{json,html}}"
    # a narrow terminal folds the path, it does not cut it
    narrow = rendered(promotion_table(data(gates)), width=100)
    folded = "".join(line.split("│")[-2].strip() for line in narrow.splitlines()
                     if line.count("│") > 2)
    assert "…" not in narrow and \
        f"n0:/var/lib/ascendctl/promotion/{NEW}/20261129T110000Z-0002.{{json,html}}" in folded
    assert promotion_table(data(None)) is None
    # --json: the same records, as they are
    assert json.loads(json.dumps(data(gates)))["releases"][0]["promotion"]["envelope"][
        "envelope"] == 16


def test_what_a_node_recorded_cannot_drive_the_terminal_or_the_markup():
    hostile = summary("soak", "fail", "20261129T100000Z-0001",
                      summary="\x1b[2J[bold red]leak[/bold red] \u202e")
    hostile["gate"] = "[link=x]soak"
    gates = latest_per_gate([hostile])
    evidence = rendered(promotion_table(data(gates)))
    assert "\x1b" not in evidence and "\u202e" not in evidence
    assert "\\x1b[2J[bold red]leak[/bold red] \\u202e" in evidence     # shown as written
    assert "[link=x]soak" in evidence
    assert "[link=x]soak fail" in rendered(history_table(data(gates)))
