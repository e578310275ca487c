"""The inventory's `pd:` section: loaded, checked by the PD rules and port ledger, planned
side by side and rendered, against vllm-ascend's Qwen3.5-397B-A17B §5.4 recipe (the
values the example copies, read here from the recipe itself)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.inventory import load_inventory as parse_inventory
from ascendctl.inventory.pd import launch_views
from ascendctl.load import load_inventory
from ascendctl.pd.inventory import inventory_findings, unit_layouts
from ascendctl.pd.ledger import overlaps
from ascendctl.pd.rules import check_layout, refusals
from ascendctl.pd.upstream import load_pd_layout
from ascendctl.plan.pd_plan import plan_pd
from ascendctl.render.release import render_release

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pd-qwen3.5-397b-a17b.yaml"
RECIPE = ROOT / "tests" / "fixtures" / "pd" / "recipes" / "qwen3.5-397b-a17b-pd.yaml"
GOOD = ROOT / "tests" / "fixtures" / "inventories" / "good.yaml"
# the Mooncake guide's kv_port table: 16 NPUs per node reserve 20000-35999
ADT_END_16 = 36000


def recipe_commands() -> list[tuple[str, list[str]]]:
    """Each recipe node's role and `vllm serve` words, as its shell would split them."""
    data = yaml.safe_load(RECIPE.read_text())
    found = []
    for node in data["nodes"]:
        script = node["script"].replace("\\\n", " ")
        found.append((node["role"], shlex.split(script[script.index("vllm serve"):])))
    return found


def flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def rendered_argv(inv) -> dict[str, list[str]]:
    ips = {h.name: [f"198.19.{i}.{n + 1}" for n in range(inv.cluster.npus_per_node)]
           for i, h in enumerate(inv.hosts)}
    release = render_release(inv, release_id="r1", checkpoint_dtype=None, device_ips=ips)
    return {host: json.loads(next(f for f in files if f.path == "engine.json").content)["argv"]
            for host, files in release.items()}


def edited(tmp_path: Path, *changes: tuple[str, str]) -> tuple[Path, str]:
    text = EXAMPLE.read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return path, text


def line_of(text: str, needle: str) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(lines) == 1, needle
    return lines[0]


@pytest.fixture(scope="module")
def example():
    return load_inventory(EXAMPLE, check_files=False)


# ---- the inventory ----

def test_the_example_splits_its_hosts_as_the_recipe_does(example):
    recipe = recipe_commands()
    assert [h.pd_role for h in example.hosts] == [role for role, _ in recipe]
    layout = unit_layouts(example)["all"]
    upstream = load_pd_layout(RECIPE)
    for ours, theirs in zip(layout.nodes, upstream.nodes, strict=True):
        assert (ours.role, ours.tp_size, ours.dp_size, ours.dp_size_local,
                ours.dp_rank_start, ours.headless, ours.dp_master) == \
            (theirs.role, theirs.tp_size, theirs.dp_size, theirs.dp_size_local,
             theirs.dp_rank_start, theirs.headless, theirs.dp_master)
        assert (ours.kv.connector, ours.kv.kv_role, ours.kv.prefill, ours.kv.decode) == \
            (theirs.kv.connector, theirs.kv.kv_role, theirs.kv.prefill, theirs.kv.decode)
        assert (ours.prefix_caching, ours.num_speculative_tokens,
                ours.recompute_scheduler) == \
            (theirs.prefix_caching, theirs.num_speculative_tokens, theirs.recompute_scheduler)


def test_the_example_passes_every_rule_with_no_port_shared(example):
    assert inventory_findings(example) == []
    assert all(overlaps(layout) == [] for layout in unit_layouts(example).values())


def test_kv_port_is_derived_above_the_transfer_range_unless_given(example):
    layout = unit_layouts(example)["all"]
    prefill, decode0, decode1 = layout.nodes
    assert prefill.kv.kv_port == ADT_END_16
    assert decode0.kv.kv_port == decode1.kv.kv_port == 36010     # the recipe's, kept
    assert len({n.kv.engine_id for n in layout.nodes}) == 3      # the guide: one per node


def test_a_non_pd_inventory_has_no_sides():
    inv = load_inventory(GOOD, check_files=False)
    assert inv.pd is None
    assert all(h.pd_role is None for h in inv.hosts)
    assert launch_views(inv) == inv.group_views()
    assert unit_layouts(inv) == {} and inventory_findings(inv) == []


def test_the_parser_alone_does_not_run_the_rules(tmp_path):
    """`ascendctl.inventory` cannot import the rules (ascendctl.pd reads files through it);
    the composition root, ascendctl.load, runs them."""
    path, _ = edited(tmp_path, ("        kv_port: 36010 ", "        kv_port: 10050 "))
    assert parse_inventory(path, check_files=False).pd is not None
    with pytest.raises(InputError):
        load_inventory(path, check_files=False)


# ---- refusals and warnings, each at the inventory's line ----

def test_a_kv_port_span_over_the_api_port_is_refused_at_its_line(tmp_path):
    path, text = edited(tmp_path, ("        kv_port: 36010 ", "        kv_port: 10045 "))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    error = caught.value
    assert error.line == line_of(text, "kv_port: 10045")
    assert error.field == "all.vars.pd.decode.kv_port"
    assert "[pd.port-overlap]" in str(error) and "port 10050" in str(error)
    assert "d0" in str(error)


def test_the_gateway_and_the_exporter_are_in_the_ledger(tmp_path):
    path, text = edited(
        tmp_path,
        ("      data_parallel_rpc_port: 6884 ",
         "      proxy: {enabled: true, port: 36005, gateway: p0}\n"
         "      data_parallel_rpc_port: 6884 "))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert "gateway (nginx, serving.proxy)" in str(caught.value)
    assert "[pd.port-overlap]" in str(caught.value)
    assert caught.value.line == line_of(text, "port: 36005")

    path, text = edited(tmp_path, ("    ssh:\n", "    deploy: {exporter_port: 36012}\n    ssh:\n"))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert "metrics exporter" in str(caught.value)


def test_prefill_tp_below_decode_tp_is_refused(tmp_path):
    path, text = edited(
        tmp_path,
        ("        tensor_parallel_size: 2        # --tensor-parallel-size 2\n"
         "        data_parallel_size: 8 ",
         "        tensor_parallel_size: 1        # --tensor-parallel-size 2\n"
         "        data_parallel_size: 8 "))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert "[pd.extra-config-tp-order]" in str(caught.value)


def test_warnings_name_file_line_field_and_rule(cli_runner, tmp_path):
    path, text = edited(tmp_path, ("        kv_port: 36010 ", "        kv_port: 23010 "),
                        ("      enable_prefix_caching: false ",
                         "      enable_prefix_caching: true "))
    result = cli_runner.run(["inventory", "check", "-i", path, "--json"], cwd=tmp_path,
                            env=os.environ | {"ASCENDCTL_KNOWN_HOSTS": "/dev/null"})
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    kv = line_of(text, "kv_port: 23010")
    prefix = line_of(text, "enable_prefix_caching: true")
    assert sum(w.startswith(f"{path}:{kv}: all.vars.pd.decode.kv_port: ") and
               w.endswith("[pd.kv-port-range]") for w in warnings) == 2
    assert sum(w.startswith(f"{path}:{prefix}: all.vars.serving.enable_prefix_caching: ")
               and w.endswith("[pd.prefix-caching]") for w in warnings) == 2


def test_a_refusal_exits_2_with_one_line(cli_runner, tmp_path):
    path, text = edited(tmp_path, ("        kv_port: 36010 ", "        kv_port: 10045 "))
    result = cli_runner.run(["inventory", "check", "-i", path], cwd=tmp_path,
                            env=os.environ | {"ASCENDCTL_KNOWN_HOSTS": "/dev/null"})
    assert result.returncode == Exit.USAGE
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: {path}:{line_of(text, 'kv_port: 10045')}: ")


# ---- the renderer ----

def test_each_node_renders_the_recipes_flags(example):
    argv = rendered_argv(example)
    recipe = recipe_commands()
    same_value = ("--tensor-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
                  "--data-parallel-rpc-port", "--max-num-seqs", "--max-num-batched-tokens",
                  "--gpu-memory-utilization", "--max-model-len", "--served-model-name",
                  "--quantization", "--seed")
    switches = ("--headless", "--enable-expert-parallel", "--no-enable-prefix-caching",
                "--enforce-eager", "--trust-remote-code", "--no-disable-hybrid-kv-cache-manager")
    for words, (role, theirs) in zip(argv.values(), recipe, strict=True):
        for name in same_value:
            assert flag(words, name) == flag(theirs, name), (role, name)
        for name in switches:
            assert (name in words) == (name in theirs), (role, name)
        for name in ("--additional-config", "--compilation-config", "--speculative-config"):
            ours, upstream = flag(words, name), flag(theirs, name)
            assert (ours and json.loads(ours)) == (upstream and json.loads(upstream)), name
        kv, kv_upstream = (json.loads(flag(w, "--kv-transfer-config") or "{}")
                           for w in (words, theirs))
        for key in ("kv_connector", "kv_role", "kv_connector_extra_config"):
            assert kv[key] == kv_upstream[key], (role, key)


def test_what_is_rendered_passes_the_rules_and_the_ledger(example, tmp_path):
    """The rendered commands, read back as a docs recipe by the upstream reader."""
    argv = rendered_argv(example)
    lines = [f"model: {example.model.name}", f"npu_per_node: {example.cluster.npus_per_node}",
             "nodes:"]
    for host in example.hosts:
        lines += [f"  - role: {host.pd_role}", "    script: |",
                  f'      local_ip="{host.ip}"', f"      {shlex.join(argv[host.name])}"]
    path = tmp_path / "rendered.yaml"
    path.write_text("\n".join(lines) + "\n")
    layout = load_pd_layout(path)
    assert refusals(check_layout(layout)) == []
    assert overlaps(layout) == []
    upstream = load_pd_layout(RECIPE)
    assert [(n.role, n.dp_rank_start, n.headless, n.dp_master, n.kv.prefill, n.kv.decode)
            for n in layout.nodes] == \
        [(n.role, n.dp_rank_start, n.headless, n.dp_master, n.kv.prefill, n.kv.decode)
         for n in upstream.nodes]


def test_replicas_are_pd_units_of_their_own(tmp_path):
    text = EXAMPLE.read_text()
    hosts_at = text.index("  children:\n    ascend:")
    groups = ["  children:"]
    for unit, base in (("unit_a", 10), ("unit_b", 20)):
        groups += [f"    {unit}:", "      vars: {serving_group: true}", "      hosts:"]
        for rank, name in enumerate(("p0", "d0", "d1")):
            ids = list(range(rank * 16, rank * 16 + 16))
            groups += [f"        {unit}_{name}:", f"          ansible_host: 198.18.130.{base + rank}",
                       f"          rank: {rank}", f"          ip: 198.18.130.{base + rank}",
                       "          nic: enp189s0f0", "          super_pod_id: 0",
                       f"          super_device_ids: {ids}"]
    groups += ["    prefill:", "      hosts: {unit_a_p0: , unit_b_p0: }",
               "    decode:", "      hosts: {unit_a_d0: , unit_a_d1: , unit_b_d0: , unit_b_d1: }"]
    text = text[:hosts_at] + "\n".join(groups) + "\n"
    text = text.replace("      data_parallel_rpc_port: 6884 ",
                        "      proxy: {enabled: true, port: 8080}\n"
                        "      data_parallel_rpc_port: 6884 ")
    path = tmp_path / "replicas.yaml"
    path.write_text(text)
    inv = load_inventory(path, check_files=False)
    layouts = unit_layouts(inv)
    assert sorted(layouts) == ["unit_a", "unit_b"]
    ids = [n.kv.engine_id for layout in layouts.values() for n in layout.nodes]
    assert len(set(ids)) == 6
    argv = rendered_argv(inv)
    address = {name: flag(words, "--data-parallel-address") for name, words in argv.items()}
    assert address["unit_b_d1"] == "198.18.130.21"        # unit_b's own decode master
    assert address["unit_a_d1"] == "198.18.130.11"
    assert flag(argv["unit_b_d1"], "--data-parallel-start-rank") == "8"


# ---- the planner ----

def test_each_side_is_planned_by_its_own_demand(example):
    prefill, decode = plan_pd(example)
    assert (prefill.role, prefill.hosts, decode.role, decode.hosts) == \
        ("prefill", ("p0",), "decode", ("d0", "d1"))
    recipe = dict((role, words) for role, words in reversed(recipe_commands()))
    # the recipe runs its prefill node at --max-num-seqs 64: a prefill engine is not judged
    # by whole sequences held at once, so that fits whatever the KV holds
    assert prefill.plan.workload.max_num_seqs == int(flag(recipe["prefill"], "--max-num-seqs"))
    assert prefill.fits and prefill.sizing()["tokens_per_step"] == 4096 * 8
    assert decode.fits
    assert decode.sizing()["max_sequences_total"] == \
        decode.plan.requested.max_seqs_per_replica * 16
    assert decode.plan.requested.layout.nodes == 2


def test_a_decode_side_short_of_kv_is_refused_by_the_planners_rule(tmp_path):
    path, _ = edited(tmp_path, ("        max_num_seqs: 32 ", "        max_num_seqs: 4096 "))
    _, decode = plan_pd(load_inventory(path, check_files=False))
    assert not decode.fits
    assert any("fewer than max_num_seqs 4096" in p for p in decode.plan.requested.problems)


@pytest.mark.parametrize("tokens, fits", [(4096, True), (16384, False)])
def test_a_prefill_side_is_judged_by_one_step_of_batched_tokens(tmp_path, tokens, fits):
    """At max_model_len 256 the prefill KV holds about 22 sequences: fewer than its
    max_num_seqs 64 (the recipe's), enough for the 16 that 4096 tokens fill, not for the 64
    that 16384 fill."""
    path, _ = edited(tmp_path, ("        max_num_batched_tokens: 4096 ",
                                f"        max_num_batched_tokens: {tokens} "),
                     ("      max_model_len: 16384 ", "      max_model_len: 256 "))
    prefill, _ = plan_pd(load_inventory(path, check_files=False))
    held = prefill.plan.requested.max_seqs_per_replica
    assert tokens // 256 <= held < 64 if fits else held < tokens // 256
    assert prefill.fits is fits
    if not fits:
        assert any(f"max_num_batched_tokens {tokens} fills" in p
                   for p in prefill.plan.requested.problems)


def test_plan_json_shows_both_sides(cli_runner, tmp_path):
    result = cli_runner.run(["plan", "-i", EXAMPLE, "--json"], cwd=tmp_path, env=os.environ)
    assert result.returncode == 0, result.stderr
    pd = json.loads(result.stdout)["pd"]
    assert pd["prefill"]["sizing"]["sized_by"] == "max_num_batched_tokens"
    assert pd["decode"]["sizing"]["sized_by"] == "kv_concurrency"
    assert flag(pd["decode"]["flags"], "--data-parallel-size") == "16"


# ---- connectors ----

def test_other_connectors_render_their_name(tmp_path):
    path, _ = edited(tmp_path, ("      connector: MooncakeConnectorV1 ",
                                "      connector: NixlConnector "))
    argv = rendered_argv(load_inventory(path, check_files=False))
    assert {json.loads(flag(w, "--kv-transfer-config") or "")["kv_connector"]
            for w in argv.values()} == {"NixlConnector"}


def test_the_layerwise_connector_is_refused_at_render_naming_the_flow(tmp_path):
    # vllm-router sends prefill first; the layerwise connector needs decode first
    path, text = edited(tmp_path, ("      connector: MooncakeConnectorV1 ",
                                   "      connector: MooncakeLayerwiseConnector "))
    inv = load_inventory(path, check_files=False)
    with pytest.raises(InputError) as caught:
        rendered_argv(inv)
    assert caught.value.field == "pd.connector"
    assert caught.value.line == line_of(text, "      connector: MooncakeLayerwiseConnector")
    assert "decode-first" in str(caught.value)


def test_a_storage_connector_needs_its_directory(tmp_path):
    path, text = edited(tmp_path, ("      connector: MooncakeConnectorV1 ",
                                   "      connector: SharedStorageConnector "))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert caught.value.line == line_of(text, "    pd:")
    assert "shared_storage_path" in str(caught.value)
    path, _ = edited(tmp_path, ("      connector: MooncakeConnectorV1 ",
                                "      connector: ExampleConnector\n"
                                "      shared_storage_path: /var/lib/ascendctl/kv "))
    argv = rendered_argv(load_inventory(path, check_files=False))
    extra = json.loads(flag(argv["d1"], "--kv-transfer-config") or "")["kv_connector_extra_config"]
    assert extra["shared_storage_path"] == "/var/lib/ascendctl/kv"
