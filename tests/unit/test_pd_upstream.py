"""Reading vllm-ascend's PD formats: every fixture loads with the values its text holds and
the lines they are on; defective upstream configs and bad input are an InputError naming
`file:line: field:`, with types strict and sizes bounded."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.pd.upstream import MAX_NODES, MAX_PD_FILE_BYTES, load_pd_layout
from tests.unit.pd_corpus import CORPUS, PD_FIXTURES, REFUSED, fixture_text, layout_of

SOURCE_LINE = re.compile(r"# source: vllm-project/vllm-ascend (\S+) @ (v0\.25\.1rc1|main) "
                         r"\([0-9a-f]{40}\)")


@pytest.mark.parametrize("path", sorted(PD_FIXTURES.glob("*/*")), ids=lambda p: p.name)
def test_every_fixture_names_its_upstream_source(path: Path) -> None:
    first = fixture_text(path).splitlines()[0]
    match = SOURCE_LINE.match(first)
    assert match, first
    assert match.group(1).startswith(("tests/e2e/", "docs/source/"))


def test_corpus_size() -> None:
    upstream = [p for p in CORPUS if p.parent.name == "upstream"]
    recipes = [p for p in CORPUS if p.parent.name == "recipes"]
    assert len(upstream) == 26 and len(recipes) == 3 and len(REFUSED) == 2


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_node_count_and_roles_match_the_file(path: Path) -> None:
    raw = yaml.safe_load(fixture_text(path))
    layout = layout_of(path)
    if "nodes" in raw:
        roles = [n["role"] for n in raw["nodes"]]
    elif "routing" in raw:
        groups = raw["routing"]["groups"]
        roles = ["prefill" if i in groups["prefiller"] else "decode"
                 for i in range(raw["num_nodes"])]
    else:
        groups = raw["disaggregated_prefill"]
        roles = ["prefill" if i in groups["prefiller_host_index"] else "decode"
                 for i in range(raw["num_nodes"])]
    assert [n.role for n in layout.nodes] == roles
    assert layout.model == raw["model"]
    assert all(n.npus == raw["npu_per_node"] for n in layout.nodes)


@pytest.mark.parametrize("path", [p for p in CORPUS if "templates:" in fixture_text(p)],
                         ids=lambda p: p.name)
def test_external_dp_node_values_are_the_config_entries(path: Path) -> None:
    raw = yaml.safe_load(fixture_text(path))
    for entry, node in zip(raw["config"], layout_of(path).nodes):
        assert (node.dp_size, node.dp_size_local, node.dp_rank_start, node.tp_size,
                node.dp_rpc_port, node.api_port, node.dp_address) == (
            entry["dp_size"], entry["dp_size_local"], entry["dp_rank_start"], entry["tp_size"],
            entry["dp_rpc_port"], entry["port_start"], entry["dp_address"])
        assert node.api_servers == entry["dp_size_local"]


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_each_value_points_at_the_line_it_was_read_from(path: Path) -> None:
    lines = fixture_text(path).splitlines()
    layout = layout_of(path)
    for node in layout.nodes:
        line = node.at("kv_port").line
        assert line is not None
        assert re.search(rf'"kv_port":\s*"?{node.kv.kv_port}\b', lines[line - 1])
        for name, needle in (("kv_role", node.kv.kv_role), ("connector", node.kv.connector)):
            line = node.at(name).line
            assert line is not None and needle in lines[line - 1], (name, line)
        line = node.at("tp_size").line
        assert line is not None and str(node.tp_size) in lines[line - 1]
        if node.num_speculative_tokens is not None:
            line = node.at("num_speculative_tokens").line
            assert line is not None and "num_speculative_tokens" in lines[line - 1]


def test_the_qwen35_recipe_reads_as_the_docs_describe_it() -> None:
    """§5.4 key parameters: prefill DP8 × TP2 on one node; decode DP16 × TP2 over two
    nodes, node 1 from rank 8 and --headless."""
    layout = layout_of(next(p for p in CORPUS if p.name == "qwen3.5-397b-a17b-pd.yaml"))
    p, d0, d1 = layout.nodes
    assert (p.dp_size, p.dp_size_local, p.tp_size) == (8, 8, 2)
    assert (d0.dp_size, d0.dp_size_local, d0.dp_rank_start, d0.headless) == (16, 8, 0, False)
    assert (d1.dp_size, d1.dp_size_local, d1.dp_rank_start, d1.headless) == (16, 8, 8, True)
    assert (p.kv.kv_port, d0.kv.kv_port) == (23010, 36010)
    assert p.recompute_scheduler is False and d0.recompute_scheduler is True
    assert d1.dp_master == 1          # ${MASTER_IP_ADDRESS}: the first decode node
    assert layout.hybrid_model


def test_the_mooncake_recipe_takes_positional_values_from_its_launch_lines() -> None:
    """run_dp_template.sh's $2..$7 come from each node's launch_online_dp.py line."""
    path = next(p for p in CORPUS if p.name == "mooncake-multi-node-non-layerwise.yaml")
    launches = re.findall(r"--dp-size (\d+) --tp-size (\d+) --dp-size-local (\d+) "
                          r"--dp-rank-start (\d+) --dp-address (\S+) --dp-rpc-port (\d+) "
                          r"--vllm-start-port (\d+)", fixture_text(path))
    assert len(launches) == 4
    for node, launch in zip(layout_of(path).nodes, launches):
        dp, tp, local, start, address, rpc, port = launch
        assert (node.dp_size, node.tp_size, node.dp_size_local, node.dp_rank_start,
                node.dp_address, node.dp_rpc_port, node.api_port) == (
            int(dp), int(tp), int(local), int(start), address, int(rpc), int(port))


# ---- upstream configs with a defect ----

def test_upstream_config_with_missing_decode_nodes_is_refused() -> None:
    path = next(p for p in REFUSED if p.name == "weekly-DeepSeek-V3_2-W8A8-EP_weekly.yaml")
    line = next(i for i, text in enumerate(fixture_text(path).splitlines(), 1)
                if "decoder_host_index" in text)
    with pytest.raises(InputError) as caught:
        load_pd_layout(path)
    assert str(caught.value).startswith(
        f"{path}:{line}: disaggregated_prefill.decoder_host_index[0]: 2 is outside 0..1")


def test_upstream_config_with_a_flag_missing_its_value_is_refused() -> None:
    path = next(p for p in REFUSED if p.name == "weekly-QWEN3_235B_PD.yaml")
    lines = fixture_text(path).splitlines()
    line = next(i for i, text in enumerate(lines, 1)
                if text.strip() == "- --data-parallel-rpc-port" and
                lines[i].strip() == "- --data-parallel-address")
    with pytest.raises(InputError) as caught:
        load_pd_layout(path)
    assert str(caught.value).startswith(f"{path}:{line}: config[0]: --data-parallel-rpc-port "
                                        "has no value")


# ---- bad input ----

BASE = PD_FIXTURES / "upstream" / "nightly-Qwen3-235B-disagg-pd.yaml"


def _variant(tmp_path: Path, old: str, new: str, *, count: int = 1) -> Path:
    text = fixture_text(BASE)
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new, count))
    return path


def _line_of(path: Path, needle: str, nth: int = 1) -> int:
    lines = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    return lines[nth - 1]


def _refused(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_pd_layout(path)
    return str(caught.value)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    assert _refused(path) == f"{path}:1: must be a mapping, not a list of 2 items"


def test_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("model: x\n")
    assert _refused(path).startswith(f"{path}:1: not a PD layout")


def test_kv_port_not_a_number(tmp_path: Path) -> None:
    path = _variant(tmp_path, '"kv_port": "30100"', '"kv_port": "30100x"')
    assert _refused(path) == (f"{path}:{_line_of(path, '30100x')}: "
                              "deployment[1].kv_transfer_config.kv_port: must be a whole "
                              "number, not '30100x'")


def test_kv_port_a_boolean(tmp_path: Path) -> None:
    path = _variant(tmp_path, '"kv_port": "30100"', '"kv_port": true')
    line = _line_of(path, '"kv_port": true')
    assert _refused(path) == (f"{path}:{line}: "
                              "deployment[1].kv_transfer_config.kv_port: must be a whole "
                              "number, not True")


def test_tensor_parallel_size_out_of_range(tmp_path: Path) -> None:
    path = _variant(tmp_path, "--tensor-parallel-size 4", "--tensor-parallel-size 0")
    assert _refused(path) == (f"{path}:{_line_of(path, '--tensor-parallel-size 0')}: "
                              "deployment[1].tp_size: 0 is outside 1..4096")


def test_npu_per_node_wrong_type(tmp_path: Path) -> None:
    path = _variant(tmp_path, "npu_per_node: 16", "npu_per_node: [16]")
    assert _refused(path) == (f"{path}:{_line_of(path, 'npu_per_node')}: npu_per_node: "
                              "must be a whole number, not a list of 1 item")


def test_kv_transfer_config_not_json(tmp_path: Path) -> None:
    path = _variant(tmp_path, '"kv_role": "kv_consumer",', '"kv_role": kv_consumer,')
    message = _refused(path)
    # the JSON is the word after the flag: its line is where the second node's JSON starts
    line = _line_of(path, "'{\"kv_connector\"", 2)
    assert message.startswith(f"{path}:{line}: "
                              "deployment[1].--kv-transfer-config: --kv-transfer-config JSON "
                              "is not valid")


def test_kv_transfer_config_missing(tmp_path: Path) -> None:
    path = _variant(tmp_path, "--kv-transfer-config", "--kv-transfer-cfg", count=2)
    # a list item is located at its first key
    assert _refused(path) == (f"{path}:{_line_of(path, '    envs:')}: deployment[0]: a PD node "
                              "needs --kv-transfer-config")


def test_server_cmd_wrong_type(tmp_path: Path) -> None:
    text = fixture_text(BASE)
    head, tail = text.split("    server_cmd: >", 1)
    path = tmp_path / "variant.yaml"
    path.write_text(head + "    server_cmd: [1]\n    unused: >" + tail)
    assert _refused(path) == (f"{path}:{_line_of(path, 'server_cmd: [1]')}: "
                              "deployment[0].server_cmd: must be text, not a list of 1 item")


def test_unbalanced_quote(tmp_path: Path) -> None:
    path = _variant(tmp_path, "--seed 1024", "--seed '1024")
    assert "cannot split the command into words" in _refused(path)


def test_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("model: x\n# " + "x" * MAX_PD_FILE_BYTES + "\n")
    assert _refused(path) == (f"{path}: {os.path.getsize(path)} bytes is too large for a "
                              f"PD layout file (limit {MAX_PD_FILE_BYTES})")


def test_too_many_nodes(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("model: x\nnpu_per_node: 8\nnodes:\n" +
                    "  - {role: prefill, script: x}\n" * (MAX_NODES + 1))
    assert _refused(path) == f"{path}:3: nodes: {MAX_NODES + 1} items is more than {MAX_NODES}"


def test_a_fifo_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    assert "a FIFO, not a regular file" in _refused(path)


def test_role_not_prefill_or_decode(tmp_path: Path) -> None:
    source = PD_FIXTURES / "recipes" / "qwen3.5-397b-a17b-pd.yaml"
    path = tmp_path / "recipe.yaml"
    path.write_text(fixture_text(source).replace("role: decode", "role: docode", 1))
    assert _refused(path) == (f"{path}:{_line_of(path, 'role: docode')}: nodes[1].role: "
                              "must be prefill or decode, not 'docode'")


def test_an_unmodified_upstream_file_with_merge_keys_is_refused_clearly(tmp_path: Path) -> None:
    """Upstream writes `envs: {<<: *env_common}`; the fixtures drop those lines."""
    path = _variant(tmp_path, "    envs:\n", "    envs:\n      <<: *env_common\n")
    assert _refused(path) == (f"{path}:{_line_of(path, '<<: *env_common')}: YAML merge keys "
                              "(<<) are not supported")


def test_deployment_item_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "variant.yaml"
    path.write_text("model: x\nnpu_per_node: 16\ndisaggregated_prefill:\n"
                    "  prefiller_host_index: [0]\n  decoder_host_index: [1]\n"
                    "deployment:\n  - just text\n  - more\n")
    assert _refused(path) == (f"{path}:7: deployment[0]: must be a mapping, not 'just text'")


def test_external_node_without_a_template(tmp_path: Path) -> None:
    source = PD_FIXTURES / "upstream" / "weekly-Qwen-3.5-397B-A17B-W8A8-PD.yaml"
    text = fixture_text(source)
    head, rest = text.split("templates:\n", 1)
    path = tmp_path / "variant.yaml"
    path.write_text(head + "templates:\n" + rest.replace("  - node_index: 2\n",
                                                         "  - node_index: 1\n", 1))
    # `- node_index: 1` is config[1], templates[1], then the changed templates[2]
    assert _refused(path) == (f"{path}:{_line_of(path, '  - node_index: 1', 3)}: "
                              "templates[2].node_index: node 1 has two templates")


def test_extra_config_side_not_an_object(tmp_path: Path) -> None:
    text = fixture_text(BASE)
    start = text.index('"decode": {', text.index('"kv_role": "kv_consumer"'))
    end = text.index("}", start) + 1
    path = tmp_path / "variant.yaml"
    path.write_text(text[:start] + '"decode": [4, 4]' + text[end:])
    line = _line_of(path, '"decode": [4, 4]')
    assert _refused(path) == (
        f"{path}:{line}: "
        "deployment[1].kv_transfer_config.kv_connector_extra_config.decode: must be a JSON "
        "object, not a list of 2 items")


def test_duplicate_key(tmp_path: Path) -> None:
    path = _variant(tmp_path, "npu_per_node: 16", "npu_per_node: 16\nnpu_per_node: 8")
    assert _refused(path) == (f"{path}:{_line_of(path, 'npu_per_node: 8')}: npu_per_node: "
                              f"duplicate key 'npu_per_node' (first defined on line "
                              f"{_line_of(path, 'npu_per_node: 16')})")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"model: \xe9\n")
    assert _refused(path) == f"{path}: not UTF-8 text (byte 7)"


def test_recipe_proxy_backends_are_read_as_written() -> None:
    path = next(p for p in CORPUS if p.name == "mooncake-multi-node-layerwise.yaml")
    text = fixture_text(path)
    proxy = layout_of(path).proxy
    assert proxy is not None
    for role, side in (("prefill", "prefiller"), ("decode", "decoder")):
        written = re.search(rf"--{side}-ports\s*\\?\s*((?:\d+\s*\\?\s*)+)", text)
        assert written
        ports = [int(p) for p in re.findall(r"\d+", written.group(1))]
        assert [b.port for b in proxy.backends if b.role == role] == ports
        line = text.splitlines()[proxy.backends[0 if role == "prefill" else -1].where.line - 1]
        assert f"--{side}-ports" in line
    # every backend host is a node's local_ip: prefill 192.0.0.1/.2, decode .3/.4
    nodes = {b.host: b.node for b in proxy.backends}
    assert nodes == {"192.0.0.1": 0, "192.0.0.2": 1, "192.0.0.3": 2, "192.0.0.4": 3}


def test_proxy_hosts_and_ports_of_unequal_length(tmp_path: Path) -> None:
    source = PD_FIXTURES / "recipes" / "qwen3.5-397b-a17b-pd.yaml"
    path = tmp_path / "recipe.yaml"
    path.write_text(fixture_text(source).replace("--decoder-ports 30050 30050",
                                                 "--decoder-ports 30050"))
    assert _refused(path) == (f"{path}:{_line_of(path, 'command: |')}: proxy.command: 2 "
                              "decoder hosts but 1 ports: the proxy refuses that")
