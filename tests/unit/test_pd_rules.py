"""The PD rules over vllm-ascend's own layouts: the corpus passes (warnings only where the
sources contradict each other), and single-value mutations of it are caught by the right
rule id and by no unrelated refusing rule."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ascendctl.pd.layout import (
    LAYERWISE_CONNECTOR, PROXY_D_FIRST, PROXY_P_FIRST, NodeLaunch, PdLayout,
)
from ascendctl.pd.rules import RULES, Finding, check_layout, refusals, rule_by_id
from tests.unit.pd_corpus import (
    CORPUS, PD_FIXTURES, fixture_text, kv_ports_written, layout_of, npu_per_node_written,
)

Mutation = tuple[str, str, PdLayout, PdLayout]     # rule id, what changed, base, mutated


def _replace_node(layout: PdLayout, index: int, **changes: object) -> PdLayout:
    nodes = list(layout.nodes)
    nodes[index] = dataclasses.replace(nodes[index], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(layout, nodes=tuple(nodes))


def _replace_kv(layout: PdLayout, index: int, **changes: object) -> PdLayout:
    node = layout.nodes[index]
    kv = dataclasses.replace(node.kv, **changes)  # type: ignore[arg-type]
    return _replace_node(layout, index, kv=kv)


def _groups(layout: PdLayout) -> list[list[NodeLaunch]]:
    """DP groups recomputed here from the fixture's numbers: consecutive nodes of a side
    whose local ranks add up to the first one's dp_size."""
    groups: list[list[NodeLaunch]] = []
    for role in ("prefill", "decode"):
        current: list[NodeLaunch] = []
        for node in (n for n in layout.nodes if n.role == role):
            current.append(node)
            if sum(n.dp_size_local for n in current) >= current[0].dp_size:
                groups.append(current)
                current = []
    return groups


# ---- single-value mutations, one generator per rule ----

def m_kv_role(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        swapped = "kv_consumer" if node.role == "prefill" else "kv_producer"
        yield ("pd.kv-role", f"node {node.index} kv_role={swapped}", layout,
               _replace_kv(layout, node.index, kv_role=swapped))


def m_connector(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes[1:]:
        other = "MooncakeConnectorV1" if node.kv.connector == LAYERWISE_CONNECTOR \
            else LAYERWISE_CONNECTOR
        yield ("pd.connector-same", f"node {node.index} kv_connector={other}", layout,
               _replace_kv(layout, node.index, connector=other))


def m_engine_id_p_d(layout: PdLayout) -> Iterator[Mutation]:
    for p in layout.nodes:
        if p.role != "prefill" or p.kv.engine_id is None:
            continue
        for d in layout.nodes:
            p_ranks = set(range(p.dp_rank_start, p.dp_rank_start + p.dp_size_local))
            d_ranks = set(range(d.dp_rank_start, d.dp_rank_start + d.dp_size_local))
            same_suffix = (p.dp_size == 1) == (d.dp_size == 1)
            if d.role == "decode" and same_suffix and p_ranks & d_ranks:
                yield ("pd.engine-id-p-d", f"node {d.index} engine_id={p.kv.engine_id}",
                       layout, _replace_kv(layout, d.index, engine_id=p.kv.engine_id))
        return


def m_engine_id_unique(layout: PdLayout) -> Iterator[Mutation]:
    for a in layout.nodes:
        for b in layout.nodes:
            if a.index < b.index and a.role == b.role and a.kv.engine_id and \
                    b.kv.engine_id and a.kv.engine_id != b.kv.engine_id:
                yield ("pd.engine-id-unique", f"node {b.index} engine_id={a.kv.engine_id}",
                       layout, _replace_kv(layout, b.index, engine_id=a.kv.engine_id))
                return


def m_dp_rank(layout: PdLayout) -> Iterator[Mutation]:
    for group in _groups(layout):
        if len(group) > 1:
            node, before = group[1], group[0]
            yield ("pd.dp-rank-cover", f"node {node.index} dp_rank_start="
                                       f"{before.dp_rank_start}", layout,
                   _replace_node(layout, node.index, dp_rank_start=before.dp_rank_start))
        else:
            node = group[0]
            yield ("pd.dp-rank-cover", f"node {node.index} dp_rank_start=1", layout,
                   _replace_node(layout, node.index, dp_rank_start=1))


def m_instance(layout: PdLayout) -> Iterator[Mutation]:
    for group in _groups(layout):
        for node in group[1:]:
            if node.dp_rpc_port is not None:
                yield ("pd.instance-consistent", f"node {node.index} dp_rpc_port+1", layout,
                       _replace_node(layout, node.index, dp_rpc_port=node.dp_rpc_port + 1))


def m_dp_address(layout: PdLayout) -> Iterator[Mutation]:
    for group in _groups(layout):
        for node in group[1:]:
            if node.dp_master is not None:
                yield ("pd.dp-address", f"node {node.index} dp_address=itself", layout,
                       _replace_node(layout, node.index, dp_master=node.index,
                                     dp_address="$LOCAL_IP"))


def m_headless(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.headless:
            yield ("pd.headless", f"node {node.index} without --headless", layout,
                   _replace_node(layout, node.index, headless=False))


def m_npus(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        used = node.dp_size_local * node.tp_size
        if used > 1:
            yield ("pd.npu-budget", f"node {node.index} npus={used - 1}", layout,
                   _replace_node(layout, node.index, npus=used - 1))


# the connectors whose workers assert the extra config's sizes (mooncake_connector.py,
# mooncake_hybrid_connector.py; the layerwise connector never reads them)
SIZED = ("MooncakeConnectorV1", "MooncakeHybridConnector")


def m_extra_present(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.kv.connector not in SIZED:
            continue
        yield ("pd.extra-config-present", f"node {node.index} no prefill.tp_size", layout,
               _replace_kv(layout, node.index,
                           prefill=dataclasses.replace(node.kv.prefill, tp_size=None)))


def m_extra_tp_order(layout: PdLayout) -> Iterator[Mutation]:
    node = layout.nodes[0]
    if node.kv.prefill.tp_size is not None and node.kv.connector in SIZED:
        bigger = node.kv.prefill.tp_size + 1
        yield ("pd.extra-config-tp-order", f"node 0 decode.tp_size={bigger}", layout,
               _replace_kv(layout, 0, decode=dataclasses.replace(node.kv.decode,
                                                                 tp_size=bigger)))


def m_extra_layout(layout: PdLayout) -> Iterator[Mutation]:
    node = layout.nodes[-1]
    if node.kv.decode.dp_size is not None:
        yield ("pd.extra-config-layout", f"node {node.index} decode.dp_size+1", layout,
               _replace_kv(layout, node.index, decode=dataclasses.replace(
                   node.kv.decode, dp_size=node.kv.decode.dp_size + 1)))


def m_port_overlap(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.api_port is None or node.headless:       # --headless: no API server
            continue
        # Mooncake's first port on this node is kv_port + dp_rank_start × tp_size
        kv_port = node.api_port - node.dp_rank_start * node.tp_size
        if kv_port >= 1:
            yield ("pd.port-overlap", f"node {node.index} kv_port={kv_port} (its API port)",
                   layout, _replace_kv(layout, node.index, kv_port=kv_port))
    for group in _groups(layout):
        master = group[0]
        # a one-node group: changing its RPC port leaves no follower disagreeing
        if len(group) == 1 and master.dp_rpc_port is not None and master.api_port is not None:
            yield ("pd.port-overlap", f"node {master.index} dp_rpc_port=api port", layout,
                   _replace_node(layout, master.index, dp_rpc_port=master.api_port))


def m_port_range(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.dp_size_local * node.tp_size > 1:
            kv_port = 65535 - node.dp_rank_start * node.tp_size
            yield ("pd.port-range", f"node {node.index} kv_port={kv_port}", layout,
                   _replace_kv(layout, node.index, kv_port=kv_port))
            return


def m_kv_port_range(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        # the guide: AscendDirectTransport allocates in [20000, 20000 + npu_per_node × 1000)
        last_reserved = 20000 + node.npus * 1000 - 1
        kv_port = last_reserved - node.dp_rank_start * node.tp_size
        if kv_port != node.kv.kv_port:
            yield ("pd.kv-port-range", f"node {node.index} kv_port={kv_port}", layout,
                   _replace_kv(layout, node.index, kv_port=kv_port))


def _proxied(layout: PdLayout) -> set[int | None]:
    """Nodes a recipe's proxy command lists: moving their API port breaks that list too."""
    return {b.node for b in layout.proxy.backends} if layout.proxy else set()


def m_api_in_adt(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        # the guide's reserved range starts at 20000; 21000 is inside it for any NPU count
        if node.api_port is not None and node.api_port != 21000 and not node.headless and \
                node.index not in _proxied(layout):
            yield ("pd.adt-range-other", f"node {node.index} api_port=21000", layout,
                   _replace_node(layout, node.index, api_port=21000))


def m_prefix(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.role == "decode" and not node.prefix_caching:
            yield ("pd.prefix-caching", f"node {node.index} prefix caching on", layout,
                   _replace_node(layout, node.index, prefix_caching=True))


def m_recompute(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        if node.role == "prefill" and not node.recompute_scheduler:
            yield ("pd.recompute-scheduler", f"node {node.index} recompute on", layout,
                   _replace_node(layout, node.index, recompute_scheduler=True))


def _hybrid(layout: PdLayout) -> bool:
    # the guide's examples of hybrid Mamba models: "Qwen-Next and Qwen3.5 series"
    return bool(re.search(r"qwen3\.5|qwen3-next", layout.model, re.IGNORECASE))


def m_spec(layout: PdLayout) -> Iterator[Mutation]:
    for node in layout.nodes:
        spec = node.num_speculative_tokens
        if spec is None:
            continue
        if _hybrid(layout) and node.role == "decode":
            yield ("pd.spec-tokens-hybrid", f"node {node.index} spec={spec + 1}", layout,
                   _replace_node(layout, node.index, num_speculative_tokens=spec + 1))
        if not _hybrid(layout) and node.role == "prefill" and spec == 1:
            yield ("pd.spec-tokens", f"node {node.index} spec=2", layout,
                   _replace_node(layout, node.index, num_speculative_tokens=2))


def m_proxy(layout: PdLayout) -> Iterator[Mutation]:
    proxy = layout.proxy
    if proxy is None:
        return
    if layout.nodes[0].kv.connector == LAYERWISE_CONNECTOR and proxy.script == PROXY_D_FIRST:
        yield ("pd.proxy-flow-layerwise", "proxy P-first", layout,
               dataclasses.replace(layout, proxy=dataclasses.replace(proxy,
                                                                     script=PROXY_P_FIRST)))
    if layout.nodes[0].kv.connector != LAYERWISE_CONNECTOR:
        yield ("pd.proxy-flow", "proxy D-first", layout,
               dataclasses.replace(layout, proxy=dataclasses.replace(proxy,
                                                                     script=PROXY_D_FIRST)))


def m_proxy_backends(layout: PdLayout) -> Iterator[Mutation]:
    proxy = layout.proxy
    if proxy is None:
        return
    for position, backend in enumerate(proxy.backends):
        if backend.node is None:
            continue
        node = layout.nodes[backend.node]
        if node.api_port is None or node.headless:
            continue
        # one past the node's API servers (external DP: port_start + dp_size_local)
        unserved = node.api_port + node.api_servers
        backends = list(proxy.backends)
        backends[position] = dataclasses.replace(backend, port=unserved)
        yield ("pd.proxy-backends", f"backend {position} port={unserved}", layout,
               dataclasses.replace(layout, proxy=dataclasses.replace(
                   proxy, backends=tuple(backends))))
        break
    listed = {b.node for b in proxy.backends}
    for node in layout.nodes:
        if node.index in listed and not node.headless and node.role == "decode":
            yield ("pd.proxy-backend-headless", f"node {node.index} --headless", layout,
                   _replace_node(layout, node.index, headless=True))
            return


def m_hccn(layout: PdLayout) -> Iterator[Mutation]:
    mounted = layout
    for node in layout.nodes:
        mounted = _replace_node(mounted, node.index, hccn_conf_mounted=True)
    for node in layout.nodes:
        yield ("pd.hccn-conf", f"node {node.index} hccn.conf not mounted", mounted,
               _replace_node(mounted, node.index, hccn_conf_mounted=False))


def m_tls(layout: PdLayout) -> Iterator[Mutation]:
    same = layout
    for node in layout.nodes:
        same = _replace_node(same, node.index, tls_switch=(0,) * node.npus)
    node = layout.nodes[-1]
    yield ("pd.tls-consistent", f"node {node.index} NPU {node.npus - 1} TLS on", same,
           _replace_node(same, node.index, tls_switch=(0,) * (node.npus - 1) + (1,)))


MUTATORS: list[Callable[[PdLayout], Iterator[Mutation]]] = [
    m_kv_role, m_connector, m_engine_id_p_d, m_engine_id_unique, m_dp_rank, m_instance,
    m_dp_address, m_headless, m_npus, m_extra_present, m_extra_tp_order, m_extra_layout,
    m_port_overlap, m_port_range, m_kv_port_range, m_api_in_adt, m_prefix, m_recompute,
    m_spec, m_proxy, m_proxy_backends, m_hccn, m_tls,
]


def all_mutations() -> list[Mutation]:
    return [m for path in CORPUS for mutate in MUTATORS for m in mutate(layout_of(path))]


def _new(base: PdLayout, mutated: PdLayout) -> list[Finding]:
    before = set(check_layout(base))
    return [f for f in check_layout(mutated) if f not in before]


# ---- the corpus ----

@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_passes_without_refusal(path: Path) -> None:
    findings = check_layout(layout_of(path))
    assert refusals(findings) == [], "\n".join(map(str, refusals(findings)))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_kv_port_warning_follows_the_guide(path: Path) -> None:
    """Warned exactly when a kv_port written in the file sits in the guide's reserved
    range for the file's NPUs per node."""
    npus = npu_per_node_written(path)
    inside = [p for p in kv_ports_written(path) if 20000 <= p < 20000 + npus * 1000]
    warned = [f for f in check_layout(layout_of(path)) if f.rule == "pd.kv-port-range"]
    assert bool(warned) == bool(inside)
    assert all(f.severity == "warn" and "36000" in f.message or npus != 16 for f in warned)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_engine_id_warning_follows_the_file(path: Path) -> None:
    written = re.findall(r'"engine_id":\s*"?([^",}\s]+)', fixture_text(path))
    warned = any(f.rule == "pd.engine-id-unique" for f in check_layout(layout_of(path)))
    assert warned == (len(written) != len(set(written)))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_layerwise_proxy_warning_follows_the_file(path: Path) -> None:
    text = fixture_text(path)
    expected = "MooncakeLayerwiseConnector" in text and \
        "load_balance_proxy_layerwise_server_example" not in text
    warned = any(f.rule == "pd.proxy-flow-layerwise" for f in check_layout(layout_of(path)))
    assert warned == expected


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_prefix_caching_warning_when_no_node_disables_it(path: Path) -> None:
    disabled = fixture_text(path).count("--no-enable-prefix-caching")
    nodes = len(layout_of(path).nodes)
    warned = any(f.rule == "pd.prefix-caching" for f in check_layout(layout_of(path)))
    if disabled == 0:
        assert warned
    elif disabled >= nodes:
        assert not warned
    else:                        # some nodes disable it: warned only for a decode node
        assert warned == any(n.role == "decode" and n.prefix_caching
                             for n in layout_of(path).nodes)


def test_the_mooncake_guide_recipes_are_clean() -> None:
    """The guide's own recipes follow every rule (kv_port 36000+ on 16 NPUs)."""
    for name in ("mooncake-multi-node-layerwise.yaml", "mooncake-multi-node-non-layerwise.yaml"):
        path = next(p for p in CORPUS if p.name == name)
        assert check_layout(layout_of(path)) == []


def test_the_qwen35_recipe_kv_port_23010_is_the_documented_contradiction() -> None:
    path = next(p for p in CORPUS if p.name == "qwen3.5-397b-a17b-pd.yaml")
    findings = check_layout(layout_of(path))
    kv = [f for f in findings if f.rule == "pd.kv-port-range"]
    assert len(kv) == 1
    # and its API ports 30060 / 30050 (the --port lines of the scripts not --headless) sit
    # in the range too
    scripts = fixture_text(path).split("    script: |")[1:]
    ports = [int(p) for script in scripts if "--headless" not in script
             for p in re.findall(r"--port (\d+) ", script)]
    assert sorted(ports) == [30050, 30060]
    # and §5.4.4's proxy lists decode node 1 (141.xx.xx.3), whose run_d1.sh is --headless
    text = fixture_text(path)
    assert "--decoder-hosts 141.xx.xx.2 141.xx.xx.3" in text
    assert text.count("--headless") == 1
    assert sorted(f.rule for f in findings) == ["pd.adt-range-other"] * 2 + [
        "pd.kv-port-range", "pd.proxy-backend-headless"]
    line = kv[0].where.line
    assert line is not None and '"kv_port": "23010"' in fixture_text(path).splitlines()[line - 1]
    reason = rule_by_id("pd.kv-port-range").reason
    assert "23010" in reason and "Qwen3.5" in reason and ">= 36000" in reason


# ---- mutations ----

MUTATIONS = all_mutations()


def test_at_least_100_mutations_cover_every_rule() -> None:
    assert len(MUTATIONS) >= 100
    assert {m[0] for m in MUTATIONS} == {r.id for r in RULES}


@pytest.mark.parametrize("mutation", MUTATIONS,
                         ids=[f"{Path(m[2].file).stem}:{m[1]}" for m in MUTATIONS])
def test_mutation_is_caught_by_its_rule_only(mutation: Mutation) -> None:
    rule_id, _, base, mutated = mutation
    new = _new(base, mutated)
    caught = [f for f in new if f.rule == rule_id]
    assert caught, f"{rule_id} missed it; new findings: {[str(f) for f in new]}"
    assert all(f.severity == rule_by_id(rule_id).severity for f in caught)
    unrelated = [str(f) for f in refusals(new) if f.rule != rule_id]
    assert unrelated == []
    for finding in caught:                     # `file:line: field: message [rule]`
        assert re.match(rf"{re.escape(base.file)}:\d+: [\w.\-\[\] ]+: .+ \[{rule_id}\]$",
                        str(finding)), str(finding)


def test_the_launcher_table_on_main_is_quoted_as_it_reads() -> None:
    table = (PD_FIXTURES / "docs" / "mooncake-launcher-constraints-main.md").read_text()
    assert "The launcher validates only argument types and required options" in table
    for rule_id, quoted in (("pd.dp-rank-cover", "without overlap"),
                            ("pd.instance-consistent", "identical within a DP group")):
        assert quoted in table and quoted in rule_by_id(rule_id).reason
    assert "`dp-size-local * tp-size` must not exceed available NPUs" in table
    assert any("main (" in s for s in rule_by_id("pd.npu-budget").sources)


def test_every_rule_cites_its_upstream_source_and_tag() -> None:
    for entry in RULES:
        assert re.fullmatch(r"pd\.[a-z0-9-]+", entry.id)
        assert entry.severity in ("refuse", "warn")
        assert entry.sources and all(
            re.search(r" @ (v0\.25\.1rc1|main \([0-9a-f]{40}\))$", s) for s in entry.sources)
        assert entry.reason and entry.title
        if entry.severity == "warn":         # a warning says which sources disagree
            assert "disagree" in entry.reason or "ignores" in entry.reason


def test_the_user_docs_list_every_rule_with_its_severity() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pd.md").read_text()
    for entry in RULES:
        assert re.search(rf"^\| `{re.escape(entry.id)}` \| {entry.severity} \|", docs,
                         re.MULTILINE), entry.id
