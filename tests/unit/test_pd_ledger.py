"""The per-node port ledger over vllm-ascend's layouts: spans as the docs give them, no
overlap in the corpus besides the documented kv_port contradiction, and an overlap names
both of its owners."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from ascendctl.pd import ledger
from ascendctl.pd.rules import check_layout
from tests.unit.pd_corpus import CORPUS, fixture_text, layout_of, reserved_ranges_from_guide


def test_reserved_range_is_the_guides_table() -> None:
    table = reserved_ranges_from_guide()
    assert sorted(table) == [8, 16]
    for npus, reserved in table.items():
        assert ledger.adt_range(npus) == reserved


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_has_no_overlap_but_the_documented_one(path: Path) -> None:
    layout = layout_of(path)
    found = ledger.overlaps(layout)
    assert [o for o in found if not o.involves(ledger.OWNER_ADT)] == []
    warned = {(f.rule, f.where) for f in check_layout(layout) if f.severity == "warn"}
    for overlap in found:          # each one inside the reserved range is warned about
        ours = overlap.second if overlap.first.owner == ledger.OWNER_ADT else overlap.first
        rule = "pd.kv-port-range" if ours.owner == ledger.OWNER_KV else "pd.adt-range-other"
        assert (rule, ours.where) in warned


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_dp_master_kv_span_is_kv_port_to_kv_port_plus_chips(path: Path) -> None:
    """The guide: "each P/D node will occupy ports ranging from kv_port to kv_port +
    num_chips" — checked against the kv_port written on the node's own line."""
    layout = layout_of(path)
    lines = fixture_text(path).splitlines()
    for node in layout.nodes:
        line = node.at("kv_port").line
        assert line is not None
        written = re.search(r'"kv_port":\s*"?(\d+)', lines[line - 1])
        assert written, lines[line - 1]
        if node.dp_rank_start == 0:
            kv = next(u for u in ledger.node_ledger(layout, node) if u.owner == ledger.OWNER_KV)
            chips = node.dp_size_local * node.tp_size
            assert kv.ports == range(int(written.group(1)), int(written.group(1)) + chips)


@pytest.mark.parametrize("path", [p for p in CORPUS if "templates:" in fixture_text(p)],
                         ids=lambda p: p.name)
def test_external_dp_api_ports_are_port_start_per_local_rank(path: Path) -> None:
    """The external_dp harness gives local rank i the port port_start + i."""
    raw = yaml.safe_load(fixture_text(path))
    layout = layout_of(path)
    for entry, node in zip(raw["config"], layout.nodes):
        api = next(u for u in ledger.node_ledger(layout, node) if u.owner == ledger.OWNER_API)
        assert api.ports == range(entry["port_start"], entry["port_start"] + entry["dp_size_local"])


def test_recipe_proxy_port_is_on_its_node() -> None:
    path = next(p for p in CORPUS if p.name == "qwen3.5-397b-a17b-pd.yaml")
    written = re.search(r"--port (\d+)\s*$", fixture_text(path).strip())
    assert written
    port = int(written.group(1))
    layout = layout_of(path)
    uses = ledger.node_ledger(layout, layout.nodes[0])
    assert [u.ports for u in uses if u.owner == ledger.OWNER_PROXY] == [range(port, port + 1)]
    assert not any(u.owner == ledger.OWNER_PROXY
                   for node in layout.nodes[1:] for u in ledger.node_ledger(layout, node))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_kv_port_on_the_api_port_names_both_owners(path: Path) -> None:
    layout = layout_of(path)
    node = layout.nodes[0]
    assert node.api_port is not None
    mutated = dataclasses.replace(layout, nodes=(dataclasses.replace(
        node, kv=dataclasses.replace(node.kv, kv_port=node.api_port)),) + layout.nodes[1:])
    found = [o for o in ledger.overlaps(mutated) if not (o.first.reserved or o.second.reserved)]
    assert len(found) == 1
    assert {found[0].first.owner, found[0].second.owner} == {ledger.OWNER_API, ledger.OWNER_KV}
    assert node.api_port in found[0].ports
    message = next(f for f in check_layout(mutated) if f.rule == "pd.port-overlap").message
    assert str(node.at("api_port")) in message and str(node.at("kv_port")) in message
    assert ledger.OWNER_API in message and ledger.OWNER_KV in message


def test_exporter_on_an_api_port_names_both_owners() -> None:
    path = next(p for p in CORPUS if p.name == "mooncake-multi-node-non-layerwise.yaml")
    layout = layout_of(path)
    api_port = layout.nodes[0].api_port
    assert api_port is not None
    mutated = dataclasses.replace(layout, exporter_port=api_port)
    pairs = [{o.first.owner, o.second.owner} for o in ledger.overlaps(mutated)]
    # every node runs its API servers from the same port in this recipe (7100)
    assert pairs == [{ledger.OWNER_API, ledger.OWNER_EXPORTER}] * len(layout.nodes)


def test_a_kv_span_past_65535_is_out_of_range() -> None:
    path = next(p for p in CORPUS if p.name == "mooncake-multi-node-layerwise.yaml")
    layout = layout_of(path)
    node = layout.nodes[0]
    mutated = dataclasses.replace(layout, nodes=(dataclasses.replace(
        node, kv=dataclasses.replace(node.kv, kv_port=65530)),) + layout.nodes[1:])
    assert [(i, u.owner) for i, u in ledger.out_of_range(mutated)] == [(0, ledger.OWNER_KV)]


@pytest.mark.parametrize("path", [p for p in CORPUS if "--headless" in fixture_text(p)],
                         ids=lambda p: p.name)
def test_a_headless_node_holds_no_api_port(path: Path) -> None:
    """`--headless` runs no API server: as many nodes without one as the file says."""
    layout = layout_of(path)
    without = [n for n in layout.nodes
               if not any(u.owner == ledger.OWNER_API for u in ledger.node_ledger(layout, n))]
    assert len(without) == fixture_text(path).count("--headless")
