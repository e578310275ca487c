"""Helpers (no tests) shared by the preflight unit tests: an inventory matching
tests/fixtures/node_outputs.py's two-node A2 cluster, and gather records in the gather script's wire format."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "node_outputs", Path(__file__).resolve().parents[1] / "fixtures" / "node_outputs.py")
no = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(no)

NONCE = "0123456789abcdef"
SENT_AT = 1767225600.0
RECEIVED_AT = 1767225601.4


def write_inventory(tmp: Path, *, extra_serving: str = "", versions: str | None = None,
                    model_files: dict[str, int] | None = None, model_path: str | None = None,
                    nodes: int = 2, hosts_extra: dict[int, str] | None = None,
                    serving: str | None = None) -> Path:
    """The node_outputs cluster as an inventory (dp mode: head 8000/13389)."""
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    for name, size in (model_files or {"model.safetensors": 4096, "config.json": 100}).items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(b"\0" * size)
    where = f"path: {model_path}" if model_path else f"source: {model}"
    versions = versions if versions is not None else "{driver: 25.3.rc1, vllm_ascend: 0.18.0}"
    serving = serving or (f"{{mode: dp, port: 8000, tensor_parallel_size: 8, data_parallel_size: {nodes}, "
                          f"data_parallel_size_local: 1, data_parallel_rpc_port: 13389, "
                          f"hccl_connect_timeout: 1200{extra_serving}}}")
    hosts = ""
    for i in range(nodes):
        ips = ", ".join(no.device_ips(i).values())
        hosts += textwrap.indent(textwrap.dedent(f"""\
            node{i}:
              ansible_host: 198.18.0.{11 + i}
              rank: {i}
              nic: enp189s0f0
              device_ips: [{ips}]
            """), " " * 8)
        if hosts_extra and i in hosts_extra:
            hosts += textwrap.indent(hosts_extra[i], " " * 10)
    text = textwrap.dedent(f"""\
        all:
          vars:
            cluster:
              name: unit
              chip: 910B3
              npus_per_node: 8
              roce: {{netmask: 255.255.255.0, mtu: 9000, tls: false}}
            ssh: {{user: root, known_hosts: /dev/null}}
            model: {{{where}, served_name: tiny}}
            serving: {serving}
            versions: {versions}
            deploy: {{root: /data/ascendctl}}
          children:
            nodes:
              hosts:
        """) + hosts
    path = tmp / "inventory.yaml"
    path.write_text(text)
    return path


def wire(sections: dict[str, str], owners: dict[int, str] | None = None,
         rc: dict[str, int] | None = None, alive: set[int] | None = None) -> str:
    """What the gather script prints for these section outputs (see facts/gather.py):
    the header, the owners block (with the PIDs alive, when given), then the sections."""
    out = [f"@@ASCENDCTL-GATHER v1 {NONCE}\n"]
    if owners is not None:
        out.append(f"@@ASCENDCTL-OWNERS {NONCE}\n")
        out += [f"/proc/{pid}/cgroup:0::/system.slice/{unit}\n" for pid, unit in owners.items()]
        if alive is not None:
            out.append("@@ASCENDCTL-ALIVE " + " ".join(map(str, sorted(alive))) + "\n")
        out.append(f"@@ASCENDCTL-OWNERS-END {NONCE}\n")
    for name, text in sections.items():
        code = (rc or {}).get(name, 0)
        out.append(f"@@{NONCE} BEGIN {name}\n{text}\n@@{NONCE} STDERR {name}\n\n"
                   f"@@{NONCE} END {name} rc={code}\n")
    return "".join(out)


def record(sections: dict[str, str], owners: dict[int, str] | None = None,
           alive: set[int] | None = None) -> dict:
    return {"output": wire(sections, owners, alive=alive), "stderr": "", "exit_status": 0, "timed_out": False,
            "sent_at": SENT_AT, "received_at": RECEIVED_AT, "duration_s": 1.4}


def cluster_records(nodes: int = 2) -> dict[str, dict]:
    return {n: record(o) for n, o in no.cluster_outputs(nodes).items()}
