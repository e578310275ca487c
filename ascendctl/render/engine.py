"""What each node runs: the engine command line per launch mode, and its environment.

Launch modes (FACTS.md):
- dp: every node runs `vllm serve` with its share of data-parallel ranks; the head runs
  the API servers, followers are `--headless` with `--data-parallel-start-rank`.
- mp: multi-node `--distributed-executor-backend mp --nnodes/--node-rank/--master-*`,
  followers `--headless`.
- ray: every node runs `ray start` (head / worker); only the head runs `vllm serve
  --distributed-executor-backend ray`.
"""

from __future__ import annotations

import posixpath

from ascendctl_runtime.nodeutil import host_port

from ascendctl.errors import InputError
from ascendctl.facts.versions import parse_version, try_parse_version
from ascendctl.inventory import Host, Inventory
from ascendctl.pd.inventory import kv_transfer_args
from ascendctl.releases.scope import pinned_release, tutorial_for
from ascendctl.plan.flags import engine_flags
from ascendctl.plan.inventory_plan import requested_layout
from ascendctl.plan.memory import HCCL_BUFFSIZE_MB_DEFAULT
from ascendctl.render.listen import listen_address


def model_path(release: str) -> str:
    return f"{release}/model"


def dp_start_rank(inv: Inventory, host: Host) -> int:
    return host.rank * inv.serving.dp_local


def data_parallel_ranks(inv: Inventory) -> dict[str, range]:
    """The data-parallel ranks each node runs (mode dp)."""
    local = inv.serving.dp_local
    return {h.name: range(dp_start_rank(inv, h), dp_start_rank(inv, h) + local)
            for h in inv.hosts}


def ray_executable(inv: Inventory) -> str:
    """`ray` next to the engine executable when that is a path, else from PATH."""
    engine = inv.serving.engine
    if "/" in engine:
        return posixpath.join(posixpath.dirname(engine), "ray")
    return "ray"


def engine_argv(inv: Inventory, host: Host, release: str, *,
                checkpoint_dtype: str | None) -> list[str] | None:
    """The full engine command for a node (None: this node runs no engine, ray workers)."""
    s = inv.serving
    head = inv.head
    common = engine_flags(s, inv.model, requested_layout(inv),
                          checkpoint_dtype=checkpoint_dtype,
                          tutorial=tutorial_for(pinned_release(inv), inv.model))
    argv = [s.engine, "serve", model_path(release), "--host", listen_address(host),
            "--port", str(s.port)]
    if s.mode == "dp":
        if host.is_head:
            argv += ["--data-parallel-size", str(s.data_parallel_size)]
            if s.api_server_count:
                argv += ["--api-server-count", str(s.api_server_count)]
            argv += ["--data-parallel-size-local", str(s.dp_local),
                     "--data-parallel-address", host.ip]
        else:
            argv += ["--headless", "--data-parallel-size", str(s.data_parallel_size),
                     "--data-parallel-size-local", str(s.dp_local),
                     "--data-parallel-start-rank", str(dp_start_rank(inv, host)),
                     "--data-parallel-address", head.ip]
        argv += ["--data-parallel-rpc-port", str(s.data_parallel_rpc_port)]
    elif s.mode == "mp":
        if len(inv.hosts) > 1:
            argv += ["--distributed-executor-backend", "mp",
                     "--nnodes", str(len(inv.hosts)), "--node-rank", str(host.rank),
                     "--master-addr", head.ip, "--master-port", str(s.master_port)]
            if not host.is_head:
                argv.append("--headless")
    else:  # ray
        if not host.is_head:
            return None
        argv += ["--distributed-executor-backend", "ray"]
    return argv + common + kv_transfer_args(inv, host)


def ray_argv(inv: Inventory, host: Host) -> list[str] | None:
    if inv.serving.mode != "ray":
        return None
    ray = ray_executable(inv)
    port = inv.serving.ray_port
    if host.is_head:
        return [ray, "start", "--head", f"--port={port}", f"--node-ip-address={host.ip}",
                "--block"]
    # Ray reads [v6]:port (its ParseAddress)
    return [ray, "start", f"--address={host_port(inv.head.ip, port)}",
            f"--node-ip-address={host.ip}", "--block"]


# vLLM read VLLM_RPC_TIMEOUT (ms) up to 0.22.x; vllm/envs.py of 0.23.0 no longer has it
# (VLLM_ENGINE_READY_TIMEOUT_S is read from 0.17.0 to 0.32.0).
RPC_TIMEOUT_GONE = parse_version("0.23.0")


def _reads_rpc_timeout(inv: Inventory) -> bool:
    """Whether the pinned vLLM reads VLLM_RPC_TIMEOUT (unpinned: set it, it is harmless)."""
    pinned = try_parse_version(inv.versions.vllm) if inv.versions.vllm else None
    return pinned is None or pinned < RPC_TIMEOUT_GONE


def engine_environment(inv: Inventory, host: Host, release: str, *,
                       nic: str | None = None) -> list[tuple[str, str]]:
    """Non-secret engine environment: the recipe's variables, then serving.env, then
    host env (later entries replace earlier ones, keeping the first position)."""
    s = inv.serving
    nic = nic or host.nic
    if nic is None:
        raise InputError(f"host {host.name}: nic is not set and was not discovered; it is "
                         "needed for GLOO/TP/HCCL_SOCKET_IFNAME", file=str(inv.path),
                         field=f"{host.name}.nic")
    pairs: list[tuple[str, str]] = [
        ("HCCL_IF_IP", host.ip),
        ("GLOO_SOCKET_IFNAME", nic),
        ("TP_SOCKET_IFNAME", nic),
        ("HCCL_SOCKET_IFNAME", nic),
        ("HCCL_CONNECT_TIMEOUT", str(s.hccl_connect_timeout)),
        ("HCCL_EXEC_TIMEOUT", str(s.hccl_exec_timeout)),
        ("HCCL_BUFFSIZE", str(HCCL_BUFFSIZE_MB_DEFAULT)),
        ("OMP_PROC_BIND", "false"),
        ("OMP_NUM_THREADS", "1"),
        ("TASK_QUEUE_ENABLE", "1"),
        ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
        ("VLLM_HOST_IP", host.ip),
        # the engine may take the whole start-up budget to load and compile
        ("VLLM_ENGINE_READY_TIMEOUT_S", str(s.startup_timeout)),
    ]
    if _reads_rpc_timeout(inv):
        pairs.append(("VLLM_RPC_TIMEOUT", str(s.startup_timeout * 1000)))
    pairs.append(("HF_HUB_OFFLINE", "1"))
    if s.export_rank_table:
        # only when asked: vllm-ascend no longer reads it (serving.export_rank_table)
        pairs.append(("RANK_TABLE_FILE", f"{release}/hccl.json"))
    if s.mode == "ray":
        npus = ",".join(str(i) for i in range(inv.cluster.npus_per_node))
        pairs += [("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "1"),
                  ("ASCEND_RT_VISIBLE_DEVICES", npus)]
    merged: dict[str, str] = dict(pairs)
    merged.update({k: str(v) for k, v in s.env.items()})
    merged.update({k: str(v) for k, v in host.env.items()})
    return list(merged.items())
