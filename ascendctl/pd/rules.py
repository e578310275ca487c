"""The cross-node rules of a PD layout, each read in vllm-ascend's docs or code at a pinned
tag, each a pure function layout → findings.

Severity: `refuse` where the launch fails at start-up or the answers go wrong; `warn`
where vllm-ascend's own sources disagree (the docs say one thing, its nightly configs or
another recipe do the other), with both sides named in the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from ascendctl.pd import ledger
from ascendctl.pd.layout import (
    KV_ROLE_OF, LAYERWISE_CONNECTOR, PROXY_D_FIRST, PROXY_P_FIRST, Instance, NodeLaunch,
    PdLayout, Where,
)

Severity = Literal["refuse", "warn"]
UPSTREAM = "vllm-project/vllm-ascend"
TAG = "v0.25.1rc1"
MOONCAKE_GUIDE = "docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md"
QWEN35_GUIDE = "docs/source/tutorials/models/Qwen3.5-397B-A17B.md"
MOONCAKE_CONNECTOR = "vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py"
EXTERNAL_DP_HARNESS = "tests/e2e/nightly/multi_node/external_dp/scripts/external_dp_config.py"
PLATFORM = "vllm_ascend/platform.py"
# The launcher's constraints table ("The launcher validates only argument types and required
# options") is on main only, after v0.25.1rc1.
MAIN = "main (182b75ea84ff13ece27b57391331ef8935410aea)"
LAUNCHER_TABLE = f"{MOONCAKE_GUIDE} @ {MAIN}"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    where: Where
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.field}: {self.message} [{self.rule}]"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: Severity
    sources: tuple[str, ...]     # "<path> @ <tag>" in vllm-project/vllm-ascend
    reason: str
    check: Callable[[PdLayout], Iterable[tuple[Where, str, str]]]

    def findings(self, layout: PdLayout) -> list[Finding]:
        return [Finding(self.id, self.severity, where, field, message)
                for where, field, message in self.check(layout)]


RULES: list[Rule] = []


def rule(id: str, title: str, severity: Severity, sources: tuple[str, ...], reason: str) \
        -> Callable[[Callable[[PdLayout], Iterable[tuple[Where, str, str]]]],
                    Callable[[PdLayout], Iterable[tuple[Where, str, str]]]]:
    def register(check: Callable[[PdLayout], Iterable[tuple[Where, str, str]]]) \
            -> Callable[[PdLayout], Iterable[tuple[Where, str, str]]]:
        RULES.append(Rule(id, title, severity,
                          tuple(s if " @ " in s else f"{s} @ {TAG}" for s in sources),
                          reason, check))
        return check
    return register


def check_layout(layout: PdLayout) -> list[Finding]:
    """Every finding of every rule, refusals first, in file order within each."""
    found = [f for r in RULES for f in r.findings(layout)]
    return sorted(found, key=lambda f: (f.severity != "refuse", f.where.line or 0, f.rule))


def refusals(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "refuse"]


def rule_by_id(rule_id: str) -> Rule:
    for entry in RULES:
        if entry.id == rule_id:
            return entry
    raise KeyError(rule_id)


Found = Iterator[tuple[Where, str, str]]


# ---- ports ----

@rule("pd.kv-port-range", "kv_port clears the AscendDirectTransport range", "warn",
      (MOONCAKE_GUIDE, QWEN35_GUIDE, "tests/e2e/*/multi_node/*/config/*.yaml"),
      "The Mooncake guide (kv_port Configuration Guide) reserves [20000, 20000 + 1000 × NPUs "
      "per node) for AscendDirectTransport's random ports and asks for kv_port above it "
      "(>= 36000 on 16 NPUs), else intermittent `zmq.error.ZMQError: Address already in "
      "use`; yet the Qwen3.5-397B-A17B recipe (§5.4.1) uses kv_port 23010 and every nightly "
      "and weekly multi-node PD config uses 30000-32123 on 16-NPU nodes. The sources "
      "disagree, so this warns.")
def _kv_port_range(layout: PdLayout) -> Found:
    for overlap in ledger.overlaps(layout):
        if overlap.involves(ledger.OWNER_KV) and overlap.involves(ledger.OWNER_ADT):
            node = layout.nodes[overlap.node]
            adt = ledger.adt_range(node.npus)
            yield (node.at("kv_port"), "kv_transfer_config.kv_port",
                   f"node {node.index} binds ports {node.kv_ports.start}-"
                   f"{node.kv_ports.stop - 1}, inside AscendDirectTransport's range "
                   f"{adt.start}-{adt.stop - 1} for {node.npus} NPUs: use kv_port >= "
                   f"{adt.stop} (the Mooncake guide; its Qwen3.5 recipe and the nightly "
                   "configs do not)")


@rule("pd.adt-range-other", "other listening ports clear the AscendDirectTransport range",
      "warn", (MOONCAKE_GUIDE, QWEN35_GUIDE),
      "The guide's reserved range [20000, 20000 + 1000 × NPUs per node) holds "
      "AscendDirectTransport's random ports, and a fixed port inside it can lose the race "
      "the same way kv_port does; the guide only speaks of kv_port, and its Qwen3.5 recipe "
      "puts the API servers on 30050/30060 inside the range. The sources disagree, so this "
      "warns.")
def _adt_other(layout: PdLayout) -> Found:
    for overlap in ledger.overlaps(layout):
        if overlap.involves(ledger.OWNER_ADT) and not overlap.involves(ledger.OWNER_KV):
            ours = overlap.second if overlap.first.owner == ledger.OWNER_ADT else overlap.first
            adt = ledger.adt_range(layout.nodes[overlap.node].npus)
            yield (ours.where, ours.field,
                   f"node {overlap.node}: {ours.describe(located=False)} is inside "
                   "AscendDirectTransport's "
                   f"range {adt.start}-{adt.stop - 1}")


@rule("pd.port-overlap", "no two owners share a port on a node", "refuse",
      (MOONCAKE_GUIDE, MOONCAKE_CONNECTOR),
      "Each P/D node occupies kv_port to kv_port + chips for Mooncake's socket listeners "
      "(the guide: \"port conflicts should be prevented\"); a port bound twice fails the "
      "second bind at start-up.")
def _port_overlap(layout: PdLayout) -> Found:
    for overlap in ledger.overlaps(layout):
        if overlap.first.reserved or overlap.second.reserved:
            continue
        span = overlap.ports
        ports = f"{span.start}" if len(span) == 1 else f"{span.start}-{span.stop - 1}"
        yield (overlap.second.where, overlap.second.field,
               f"node {overlap.node}: port {ports} is used by both "
               f"{overlap.first.describe()} and {overlap.second.describe()}")


@rule("pd.port-range", "every port fits in 1-65535", "refuse", (MOONCAKE_CONNECTOR,),
      "Mooncake binds kv_port + dp_rank × tp_size + tp_rank for every rank on the node; a "
      "span past 65535 cannot be bound.")
def _port_range(layout: PdLayout) -> Found:
    for index, use in ledger.out_of_range(layout):
        yield (use.where, use.field, f"node {index}: {use.owner} needs ports "
                                     f"{use.ports.start}-{use.ports.stop - 1}, past 65535")


# ---- roles and connector ----

@rule("pd.kv-role", "kv_producer on prefill, kv_consumer on decode", "refuse",
      (QWEN35_GUIDE, MOONCAKE_GUIDE),
      "`kv_role` is `kv_producer` on prefill and `kv_consumer` on decode (Qwen3.5 guide, key "
      "parameters for PD); a swapped role makes a node wait for KV nobody sends.")
def _kv_role(layout: PdLayout) -> Found:
    for node in layout.nodes:
        want = KV_ROLE_OF[node.role]
        if node.kv.kv_role != want:
            yield (node.at("kv_role"), "kv_transfer_config.kv_role",
                   f"node {node.index} is {node.role} but has kv_role {node.kv.kv_role!r}, "
                   f"not {want!r}")


@rule("pd.connector-same", "one kv_connector on every node", "refuse", (MOONCAKE_GUIDE,),
      "P and D speak the connector's own handshake: the guide's recipes set one connector "
      "(MooncakeLayerwiseConnector or MooncakeConnectorV1) on all nodes.")
def _connector_same(layout: PdLayout) -> Found:
    first = layout.nodes[0]
    for node in layout.nodes[1:]:
        if node.kv.connector != first.kv.connector:
            yield (node.at("connector"), "kv_transfer_config.kv_connector",
                   f"node {node.index} uses {node.kv.connector!r}, node {first.index} "
                   f"({first.at('connector')}) uses {first.kv.connector!r}")


# ---- engine ids ----

@rule("pd.engine-id-unique", "a distinct engine_id per node", "warn",
      (MOONCAKE_GUIDE, "tests/e2e/weekly/multi_node/external_dp/config/*.yaml"),
      "The guide: \"ensure that each node's engine_id is uniquely assigned to avoid "
      "conflicts\"; the weekly external-DP configs give the nodes of one DP group (and, in "
      "DeepSeek_V3.1T_layerwise_PD, two prefill groups) the same engine_id, relying on "
      "vLLM's `_dp<rank>` suffix. The sources disagree, so this warns.")
def _engine_id_unique(layout: PdLayout) -> Found:
    seen: dict[str, NodeLaunch] = {}
    for node in layout.nodes:
        eid = node.kv.engine_id
        if eid is None:
            continue
        if eid in seen:
            yield (node.at("engine_id"), "kv_transfer_config.engine_id",
                   f"node {node.index} repeats engine_id {eid!r} of node "
                   f"{seen[eid].index} ({seen[eid].at('engine_id')})")
        else:
            seen[eid] = node


@rule("pd.engine-id-p-d", "prefill and decode never share an engine id", "refuse",
      (MOONCAKE_CONNECTOR,),
      "vLLM registers `<engine_id>_dp<rank>` per DP rank; when a decode engine meets a "
      "prefill engine of its own id the connector's handshake asserts \"Conflict engine id\" "
      "(mooncake_connector.py).")
def _engine_id_p_d(layout: PdLayout) -> Found:
    prefill_ids = {eid: node for node in layout.prefill.nodes for eid in node.engine_ids}
    for node in layout.decode.nodes:
        clash = sorted(set(node.engine_ids) & set(prefill_ids))
        if clash:
            other = prefill_ids[clash[0]]
            yield (node.at("engine_id"), "kv_transfer_config.engine_id",
                   f"decode node {node.index} registers {clash[0]!r} like prefill node "
                   f"{other.index} ({other.at('engine_id')})")


# ---- data-parallel layout ----

@rule("pd.dp-rank-cover", "each DP group's ranks cover [0, dp_size) once", "refuse",
      (QWEN35_GUIDE, EXTERNAL_DP_HARNESS, LAUNCHER_TABLE),
      "The nodes of one DP group start at distinct ranks (Qwen3.5 guide Q2: "
      "`--data-parallel-start-rank` must not overlap) and together run ranks 0..dp_size-1 "
      "(the launcher table on main: \"must cover [0, dp-size) without overlap\"); a missing "
      "rank hangs the group at start-up, a duplicate one collides.")
def _dp_rank_cover(layout: PdLayout) -> Found:
    for instance in layout.instances():
        owner: dict[int, NodeLaunch] = {}
        for node in instance.nodes:
            for rank in node.dp_ranks:
                if rank >= instance.dp_size:
                    yield (node.at("dp_rank_start"), "data_parallel_start_rank",
                           f"node {node.index} runs DP ranks {node.dp_ranks.start}-"
                           f"{node.dp_ranks.stop - 1}, past dp_size {instance.dp_size}")
                    break
                if rank in owner:
                    yield (node.at("dp_rank_start"), "data_parallel_start_rank",
                           f"node {node.index} runs DP rank {rank}, as node "
                           f"{owner[rank].index} does ({owner[rank].at('dp_rank_start')})")
                    break
                owner[rank] = node
        missing = [r for r in range(instance.dp_size) if r not in owner]
        if missing and len(owner) == sum(n.dp_size_local for n in instance.nodes):
            yield (instance.master.at("dp_size"), "data_parallel_size",
                   f"the {instance.role} DP group of node {instance.master.index} has "
                   f"dp_size {instance.dp_size} but no node runs ranks {_ranges(missing)}")


def _ranges(numbers: list[int]) -> str:
    return f"{numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else str(numbers[0])


@rule("pd.instance-consistent", "the nodes of a DP group agree", "refuse",
      (QWEN35_GUIDE, LAUNCHER_TABLE),
      "One DP group has one dp_size, tp_size and DP RPC port (Qwen3.5 guide Q2: \"all nodes "
      "use the same --data-parallel-rpc-port\"; the launcher table on main: dp-size and "
      "dp-rpc-port \"identical within a DP group\"); a node that differs never joins it.")
def _instance_consistent(layout: PdLayout) -> Found:
    for instance in layout.instances():
        master = instance.master
        for node in instance.nodes[1:]:
            for name, label, mine, theirs in (
                    ("dp_size", "data_parallel_size", node.dp_size, master.dp_size),
                    ("tp_size", "tensor_parallel_size", node.tp_size, master.tp_size),
                    ("dp_rpc_port", "data_parallel_rpc_port", node.dp_rpc_port,
                     master.dp_rpc_port)):
                if mine != theirs:
                    yield (node.at(name), label,
                           f"node {node.index} has {mine}, its DP group's first node "
                           f"{master.index} has {theirs} ({master.at(name)})")


@rule("pd.dp-address", "a DP group's nodes point at its first node", "refuse",
      (QWEN35_GUIDE, LAUNCHER_TABLE),
      "`--data-parallel-address` defines the DP control plane: \"for decode nodes, the "
      "address must point to decode node 0\" (Qwen3.5 guide, key parameters).")
def _dp_address(layout: PdLayout) -> Found:
    for instance in layout.instances():
        master = instance.master
        for node in instance.nodes:
            if node.dp_master is not None and node.dp_master != master.index:
                yield (node.at("dp_address"), "data_parallel_address",
                       f"node {node.index} ({node.role}) points at node {node.dp_master} "
                       f"({node.dp_address}), not its DP group's first node {master.index}")


@rule("pd.headless", "follower nodes of vLLM's own DP run --headless", "refuse",
      (QWEN35_GUIDE,),
      "When one `vllm serve` spans nodes (internal DP), \"non-master nodes use --headless\" "
      "(Qwen3.5 guide Q2): a second API server on a follower breaks the group's start-up.")
def _headless(layout: PdLayout) -> Found:
    for instance in layout.instances():
        for node in instance.nodes[1:]:
            if not node.external_dp and not node.headless:
                yield (node.at("dp_rank_start"), "headless",
                       f"node {node.index} starts at DP rank {node.dp_rank_start} of "
                       f"node {instance.master.index}'s group but is not --headless")


@rule("pd.npu-budget", "dp_size_local × tp_size fits the node's NPUs", "refuse",
      (EXTERNAL_DP_HARNESS, LAUNCHER_TABLE),
      "A node runs dp_size_local ranks of tp_size NPUs each; more than the node has cannot "
      "start (the nightly harness refuses \"node uses N NPUs, but npu_per_node is M\").")
def _npu_budget(layout: PdLayout) -> Found:
    for node in layout.nodes:
        if node.chips_used > node.npus:
            yield (node.at("dp_size_local"), "data_parallel_size_local",
                   f"node {node.index} needs {node.dp_size_local} × {node.tp_size} = "
                   f"{node.chips_used} NPUs, it has {node.npus} ({node.at('npus')})")


# ---- kv_connector_extra_config ----

# the connectors that read kv_connector_extra_config.prefill/.decode (the layerwise one
# does not: mooncake_layerwise_connector.py reads only its tls_config from there)
SIZED_CONNECTORS = ("MooncakeConnectorV1", "MooncakeHybridConnector")
MOONCAKE_HYBRID_CONNECTOR = \
    "vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_hybrid_connector.py"


def _mooncake(node: NodeLaunch) -> bool:
    return node.kv.connector in SIZED_CONNECTORS


@rule("pd.extra-config-present", "kv_connector_extra_config names both layouts", "refuse",
      (MOONCAKE_CONNECTOR, MOONCAKE_HYBRID_CONNECTOR),
      "MooncakeConnectorV1 and MooncakeHybridConnector assert `tp_size` and `dp_size` in "
      "both kv_connector_extra_config.prefill and .decode at start-up.")
def _extra_present(layout: PdLayout) -> Found:
    for node in layout.nodes:
        if not _mooncake(node):
            continue
        for side, sizes in (("prefill", node.kv.prefill), ("decode", node.kv.decode)):
            for key, value in (("dp_size", sizes.dp_size), ("tp_size", sizes.tp_size)):
                if value is None:
                    yield (node.at(f"extra.{side}"), f"kv_connector_extra_config.{side}.{key}",
                           f"node {node.index}: missing (the connector asserts it)")


@rule("pd.extra-config-tp-order", "prefill tp_size >= decode tp_size", "refuse",
      (MOONCAKE_CONNECTOR, MOONCAKE_HYBRID_CONNECTOR),
      "MooncakeConnectorV1's and MooncakeHybridConnector's workers raise "
      "\"prefill_tp_size ... must be greater than or equal "
      "to the decode_tp_size\" at start-up.")
def _extra_tp_order(layout: PdLayout) -> Found:
    for node in layout.nodes:
        p, d = node.kv.prefill.tp_size, node.kv.decode.tp_size
        if _mooncake(node) and p is not None and d is not None and p < d:
            yield (node.at("extra.prefill"), "kv_connector_extra_config.prefill.tp_size",
                   f"node {node.index}: prefill tp_size {p} < decode tp_size {d}")


def _extra_mismatch(layout: PdLayout, side: str) -> Found:
    groups: tuple[Instance, ...] = layout.part("prefill" if side == "prefill"
                                               else "decode").instances
    real = {(g.dp_size, g.tp_size) for g in groups}
    if len(real) != 1:
        return                     # differently sized groups: no single layout to compare
    dp, tp = real.pop()
    for node in layout.nodes:
        sizes = node.kv.prefill if side == "prefill" else node.kv.decode
        for key, said, actual in (("dp_size", sizes.dp_size, dp), ("tp_size", sizes.tp_size, tp)):
            if said is not None and said != actual:
                yield (node.at(f"extra.{side}"), f"kv_connector_extra_config.{side}.{key}",
                       f"node {node.index} says {said}, the {side} DP groups run "
                       f"{key} {actual}")


@rule("pd.extra-config-layout", "kv_connector_extra_config matches the real layout", "warn",
      (QWEN35_GUIDE, MOONCAKE_CONNECTOR, "tests/e2e/weekly/multi_node/external_dp/config/*.yaml"),
      "The Qwen3.5 guide: `kv_connector_extra_config.prefill.dp_size/tp_size` and "
      "`decode.dp_size/tp_size` \"must match the actual global DP and TP layout\"; three "
      "weekly configs do not (QWEN3_235B_PD_3_5K_1_5k: prefill DP1 x TP16 declared as "
      "{2, 8}; DeepSeek_V3.1T_MTP3_PD: decode DP8 x TP4 declared as {32, 1}; "
      "DeepSeek_V3.2T_MTP3_PD: decode DP32 x TP1 declared as {8, 4}), and the connector "
      "takes the prefill TP from each request (`remote_ptp_size`) before this value. The "
      "sources disagree, so this warns.")
def _extra_layout(layout: PdLayout) -> Found:
    yield from _extra_mismatch(layout, "prefill")
    yield from _extra_mismatch(layout, "decode")


# ---- vLLM flags per side ----

@rule("pd.prefix-caching", "prefix caching off on decode nodes", "warn",
      (QWEN35_GUIDE, "tests/e2e/*/multi_node/*/config/*.yaml"),
      "The Qwen3.5 guide (Q3): use --no-enable-prefix-caching for PD until the decode-node "
      "prefix-cache issue #7944 is resolved; several nightly configs (GLM5_1-W8A8-EP, "
      "DeepSeek-R1-W8A8-EPLB, MiniMax-PD, GLM_5_1_PD_*-90) run decode nodes with vLLM's "
      "default (enabled). The sources disagree, so this warns.")
def _prefix_caching(layout: PdLayout) -> Found:
    for node in layout.decode.nodes:
        if node.prefix_caching:
            yield (node.at("prefix_caching"), "enable_prefix_caching",
                   f"decode node {node.index} runs with prefix caching on: add "
                   "--no-enable-prefix-caching (vllm-ascend #7944)")


@rule("pd.recompute-scheduler", "recompute_scheduler_enable only on decode", "warn",
      (QWEN35_GUIDE, PLATFORM),
      "recompute_scheduler_enable is \"only valid on decode nodes where kv_role is "
      "kv_consumer\" (Qwen3.5 guide); on a prefill node vllm-ascend ignores it with a "
      "warning (platform.py), and the weekly DeepSeek_V3.1T configs set it there.")
def _recompute(layout: PdLayout) -> Found:
    for node in layout.prefill.nodes:
        if node.recompute_scheduler:
            yield (node.at("recompute_scheduler"), "additional_config.recompute_scheduler_enable",
                   f"prefill node {node.index}: ignored on kv_producer nodes; set it on "
                   "decode nodes only")


def _spec(node: NodeLaunch) -> int:
    return node.num_speculative_tokens or 0


@rule("pd.spec-tokens-hybrid", "hybrid models: equal num_speculative_tokens on P and D",
      "refuse", (MOONCAKE_GUIDE, "docs/source/tutorials/models/Qwen3.5-27B-Qwen3.6-27B.md"),
      "For hybrid Mamba models (Qwen-Next, Qwen3.5; Qwen3.6 is the same hybrid design) "
      "num_speculative_tokens must be equal on "
      "P and D nodes (the guide's note on speculative decoding): the transferred state is "
      "sized by it.")
def _spec_hybrid(layout: PdLayout) -> Found:
    if not layout.hybrid_model:
        return
    first = layout.nodes[0]
    for node in layout.nodes[1:]:
        if _spec(node) != _spec(first):
            yield (node.at("num_speculative_tokens"), "speculative_config.num_speculative_tokens",
                   f"node {node.index} ({node.role}) speculates {_spec(node)} tokens, node "
                   f"{first.index} ({first.role}) {_spec(first)}: a hybrid model needs them "
                   "equal")


@rule("pd.spec-tokens", "other models: 1 speculative token on P, >= 1 on D", "warn",
      (MOONCAKE_GUIDE, "tests/e2e/*/multi_node/*/config/*.yaml"),
      "The guide: for non-hybrid models num_speculative_tokens on P nodes should be 1 and "
      "on D nodes >= 1; the nightly DeepSeek-V3.2, GLM-5.1, Kimi-K2.5 and MiniMax configs "
      "run P with 2 or 3 (or none). The sources disagree, so this warns.")
def _spec_other(layout: PdLayout) -> Found:
    if layout.hybrid_model or not any(n.num_speculative_tokens for n in layout.nodes):
        return
    for node in layout.nodes:
        ok = _spec(node) == 1 if node.role == "prefill" else _spec(node) >= 1
        if not ok:
            want = "1" if node.role == "prefill" else ">= 1"
            yield (node.at("num_speculative_tokens"), "speculative_config.num_speculative_tokens",
                   f"{node.role} node {node.index} speculates {_spec(node)} tokens, the "
                   f"guide says {want}")


# ---- proxy ----

@rule("pd.proxy-flow", "MooncakeConnector layouts use the P-first proxy", "refuse",
      (MOONCAKE_GUIDE,),
      "load_balance_proxy_server_example.py routes to P first, then D, and is the one for "
      "MooncakeConnector; the layerwise proxy routes to D first, which a non-layerwise "
      "prefill never answers.")
def _proxy_flow(layout: PdLayout) -> Found:
    proxy = layout.proxy
    if proxy is not None and layout.connector != LAYERWISE_CONNECTOR \
            and proxy.script == PROXY_D_FIRST:
        yield (proxy.where, "proxy", f"{proxy.script} sends requests to D first; "
                                     f"{layout.connector} needs {PROXY_P_FIRST}")


@rule("pd.proxy-flow-layerwise", "MooncakeLayerwiseConnector layouts use the D-first proxy",
      "warn", (MOONCAKE_GUIDE, EXTERNAL_DP_HARNESS),
      "The guide: load_balance_proxy_layerwise_server_example.py (D first) is designed for "
      "MooncakeLayerwiseConnector; the external-DP nightly harness runs every layout, "
      "DeepSeek_V3.1T_layerwise_PD included, with the P-first proxy. The sources disagree, "
      "so this warns.")
def _proxy_layerwise(layout: PdLayout) -> Found:
    proxy = layout.proxy
    if proxy is not None and layout.connector == LAYERWISE_CONNECTOR \
            and proxy.script != PROXY_D_FIRST:
        yield (proxy.where, "proxy", f"{proxy.script} with {LAYERWISE_CONNECTOR}: the guide "
                                     f"pairs it with {PROXY_D_FIRST}")


PROXY_SCRIPT = "examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
INTERNAL_DP_HARNESS = "tests/e2e/nightly/multi_node/internal_dp/scripts/multi_node_config.py"


def _api_ports(node: NodeLaunch) -> range:
    if node.api_port is None or node.headless:
        return range(0)
    return range(node.api_port, node.api_port + node.api_servers)


@rule("pd.proxy-backends", "the proxy's backends are API servers of their side", "refuse",
      (MOONCAKE_GUIDE, LAUNCHER_TABLE, PROXY_SCRIPT),
      "The proxy sends prefill work to --prefiller-hosts/--prefiller-ports and decode work "
      "to --decoder-hosts/--decoder-ports; the API ports \"must match the proxy "
      "configuration\" (the launcher table on main). A backend no server of that side "
      "listens on loses every request routed to it.")
def _proxy_backends(layout: PdLayout) -> Found:
    proxy = layout.proxy
    for backend in proxy.backends if proxy else ():
        if backend.node is None:
            continue
        node = layout.nodes[backend.node]
        if node.headless:
            continue                  # pd.proxy-backend-headless
        if node.role != backend.role or backend.port not in _api_ports(node):
            served = _api_ports(node)
            yield (backend.where, "proxy",
                   f"{backend.role} backend {backend.host}:{backend.port} is node "
                   f"{node.index} ({node.role}), whose API servers listen on "
                   f"{served.start}-{served.stop - 1} ({node.at('api_port')})")


@rule("pd.proxy-backend-headless", "the proxy does not list headless nodes", "warn",
      (QWEN35_GUIDE, INTERNAL_DP_HARNESS),
      "A --headless node runs no API server; the nightly harness leaves headless nodes out "
      "of the proxy's host lists, but the Qwen3.5 recipe (§5.4.4) lists its headless decode "
      "node 1 (141.xx.xx.3:30050). The sources disagree, so this warns (the proxy retries "
      "elsewhere, at a cost).")
def _proxy_headless(layout: PdLayout) -> Found:
    proxy = layout.proxy
    for backend in proxy.backends if proxy else ():
        if backend.node is not None and layout.nodes[backend.node].headless:
            yield (backend.where, "proxy",
                   f"{backend.role} backend {backend.host}:{backend.port} is node "
                   f"{backend.node}, which runs --headless (no API server)")


# ---- host facts ----

@rule("pd.hccn-conf", "hccn.conf is mounted into the container", "refuse", (MOONCAKE_GUIDE,),
      "\"Ensure that the hccn.conf file exists in the environment. If using Docker, mount "
      "it into the container\" (the guide's NPU HCCN check): without it the transfer "
      "engine cannot find the NPU NICs.")
def _hccn(layout: PdLayout) -> Found:
    for node in layout.nodes:
        if node.hccn_conf_mounted is False:
            yield (node.at("hccn"), "hccn_conf", f"node {node.index}: /etc/hccn.conf is not "
                                                 "mounted into the container")


@rule("pd.tls-consistent", "NPU TLS switch identical on every NPU", "refuse",
      (MOONCAKE_GUIDE,),
      "\"The TLS settings should be consistent across all nodes\" (the guide's TLS check, "
      "`hccn_tool -i $i -tls -g`): NPUs with TLS on and off cannot link.")
def _tls(layout: PdLayout) -> Found:
    reference: tuple[NodeLaunch, int] | None = None
    for node in layout.nodes:
        for npu, switch in enumerate(node.tls_switch or ()):
            if reference is None:
                reference = (node, switch)
            elif switch != reference[1]:
                yield (node.at("tls"), "tls_switch",
                       f"node {node.index} NPU {npu} has TLS switch {switch}, node "
                       f"{reference[0].index} NPU 0 has {reference[1]}")
