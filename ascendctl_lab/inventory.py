"""The inventory `lab up` writes (Ansible-style YAML), which later commands take with -i."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ascendctl_lab.image import ROUTER_EXECUTABLE
from ascendctl_lab.node import SHARED_DIR

PROXY_PORT = 8080
# `lab up --pd`: vLLM's storage connector (the lab's CPU engine has no Mooncake), its KV
# files in the directory every lab node shares (SHARED_DIR); each unit's router is the
# node image's (ROUTER_EXECUTABLE)
PD_CONNECTOR = "ExampleConnector"
PD_ROUTER_PORT = 8100


def build(*, name: str, chip: str, npus: int, roce_mtu: int, netmask: str, key: Path,
          known_hosts: Path, nodes: list[dict], roce_gateway: str, model_dir: Path,
          versions: dict[str, str], engine: str | dict, replicas: int = 1,
          pd: bool = False, api_key_file: Path | None = None) -> dict:
    """`engine`: the vllm executable on the nodes (engine.kind host), or an `engine:`
    section (container, venv). `replicas` > 1: that many serving groups of
    len(nodes) / replicas nodes each (ranks within the group, one pipeline stage per
    node), behind nginx on node0 (the first group's head), with the API key in
    API_KEY_FILE and the quality gate agreeing with the previous release. `pd`: every
    pair of nodes is one PD unit (a serving group: its first node in the group `prefill`,
    its second in `decode`, each side one node of DP 1 × TP 1), behind nginx on node0 as
    with replicas."""
    if pd:
        if replicas != 1:
            raise ValueError("pd makes its own serving groups (one per pair of nodes); "
                             "replicas must be 1")
        if not nodes or len(nodes) % 2:
            raise ValueError(f"{len(nodes)} nodes do not make prefill/decode pairs")
        replicas = len(nodes) // 2
    per_group = len(nodes) // replicas
    if per_group < 1 or per_group * replicas != len(nodes):
        raise ValueError(f"{len(nodes)} nodes do not make {replicas} equal serving groups")
    data: dict[str, Any] = {
        "all": {
            "vars": {
                "cluster": {"name": name, "chip": chip, "npus_per_node": npus,
                            "roce": {"netmask": netmask, "mtu": roce_mtu, "tls": False,
                                     "gateway": roce_gateway, "netdetect": roce_gateway}},
                "ssh": {"user": "root", "port": 22, "private_key": str(key),
                        "known_hosts": str(known_hosts), "host_key_checking": "strict"},
                "model": {"name": "ascendctl-lab/tiny-qwen3", "source": str(model_dir),
                          "dtype": "bfloat16", "served_name": "tiny"},
                # One pipeline stage per node (vLLM's CPU build runs PP across nodes).
                # vLLM's CPU build: one pipeline stage per node over gloo, a fixed KV
                # space (it cannot measure free device memory), each node's engine bound
                # to its own CPU (a shared machine).
                # Compile mode 2 (DYNAMO_TRACE_ONCE) with the eager backend: the same
                # answers as the CPU build's default (inductor, which compiles C++ with
                # g++ for a minute at every start) in half the start-up; mode 0 and
                # --enforce-eager fail under pipeline parallel on CPU.
                "serving": {"mode": "mp", "port": 8000,
                            "tensor_parallel_size": 1, "pipeline_parallel_size": per_group,
                            "max_model_len": 256, "max_num_seqs": 8, "startup_timeout": 300,
                            "compilation_config": {"mode": 2, "backend": "eager"},
                            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
                            # the fault monitor runs ~20 simulated tool calls per reading on
                            # each node: every 30 s on this small machine (10 s by default)
                            "health": {"fault_interval_s": 30}},
                "versions": versions,
                # SLOs for `ascendctl bench` with tiny settings (e.g. --input-len 32
                # --output-len 16): generous, as the nodes share a small machine's CPUs.
                "slo": {"min_output_tokens_per_s_per_npu": 1.0, "max_p99_ttft_ms": 30000,
                        "max_p99_tpot_ms": 5000},
            },
            "children": {"nodes": {"hosts": _hosts(nodes, per_group)}},
        }
    }
    variables = data["all"]["vars"]
    if replicas > 1 or pd:
        prefix = "unit" if pd else "replica"
        data["all"]["children"]["nodes"] = {"children": {
            f"{prefix}{g}": {"vars": {"serving_group": True},
                             "hosts": _hosts(nodes[g * per_group:(g + 1) * per_group],
                                             per_group)}
            for g in range(replicas)}}
        variables["serving"]["proxy"] = {"enabled": True, "port": PROXY_PORT}
        variables["slo"]["quality"] = {"agree_with_previous": True, "min_agreement": 0.9}
        if api_key_file is not None:
            variables["serving"]["api_key"] = {"file": str(api_key_file)}
    if pd:
        _make_pd(data)
    if isinstance(engine, str):
        variables["serving"] = {"mode": variables["serving"]["mode"], "engine": engine,
                                **{k: v for k, v in variables["serving"].items() if k != "mode"}}
    else:
        variables["engine"] = dict(engine)
    return data


def _make_pd(data: dict) -> None:
    """The `pd:` section and the `prefill` / `decode` groups: in each unit, the first host
    (rank 0) prefills and the second (rank 1) decodes; each side is one node, rank 0 of its
    own DP group."""
    variables = data["all"]["vars"]
    serving = variables["serving"]
    # each side is one vLLM data-parallel group of one node (the PD loader's layout)
    serving["mode"] = "dp"
    serving.pop("pipeline_parallel_size", None)
    # The storage connector moves whole KV blocks of the prompt (all but its last token):
    # the CPU build's default 128-token blocks would move nothing for the lab's short
    # prompts. 32 is the smallest size its attention kernel takes.
    serving["extra_args"] = ["--block-size", "32"]
    side = {"tensor_parallel_size": 1, "data_parallel_size": 1}
    variables["pd"] = {"connector": PD_CONNECTOR,
                       "shared_storage_path": f"{SHARED_DIR}/kv",
                       # the guide's PD setting (pd.prefix-caching): a prompt decode has
                       # seen must still come from prefill, not from decode's own cache
                       "prefill": dict(side),
                       "decode": {**side, "enable_prefix_caching": False},
                       "router": {"port": PD_ROUTER_PORT, "executable": ROUTER_EXECUTABLE}}
    children = data["all"]["children"]
    units = children["nodes"]["children"].values()
    for role, rank in (("prefill", 0), ("decode", 1)):
        children[role] = {"hosts": {name: None for unit in units
                                    for name, host in unit["hosts"].items()
                                    if host["rank"] == rank}}


def _hosts(nodes: list[dict], per_group: int) -> dict:
    """Host entries; ranks count within the serving group, and each node's engine gets a
    CPU of its own across the whole lab (the machine's cores are shared)."""
    return {
        n["name"]: {"ansible_host": n["mgmt_ip"], "rank": n["rank"] % per_group,
                    "ip": n["mgmt_ip"], "nic": n["nic"], "device_ips": list(n["device_ips"]),
                    "env": {"VLLM_CPU_OMP_THREADS_BIND": str(n["rank"] % (os.cpu_count() or 1))}}
        for n in nodes
    }


def write(path: Path, data: dict) -> None:
    import yaml

    header = ("# Written by `ascendctl lab up` for the simulated cluster; "
              "use it with `-i`.\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None,
                                           width=100))
    tmp.replace(path)
