"""The Lab: bring a simulated Ascend cluster up and down, run commands on its nodes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ascendctl.errors import InputError
from ascendctl.extras import require_extra
from ascendctl_lab import faults, inventory, modelinfo_cache, paths, provision, registry
from ascendctl_lab import image as lab_image
from ascendctl_lab import network as net
from ascendctl_lab import node as lab_node
from ascendctl_lab.engine_image import ENGINE_COMMAND, build_engine_image
from ascendctl_lab.hostcmd import LabError, check_host, run
from ascendctl_lab.model import build_model
from ascendctl_lab.node import SHARED_DIR
from ascendctl_lab.sim import state as sim_state
from ascendctl_lab.standin import install as standin_install
from ascendctl_lab.wheelhouse import build_wheelhouse

if TYPE_CHECKING:
    from ascendctl_lab.network import LabNet

Progress = Callable[[str], None]
DEFAULT_NAME = "lab"
ENGINE_KINDS = ("host", "container", "venv", "standin")
CONTAINER_STORAGE = "/var/lib/containers"   # podman's storage in a node (a host directory)


def _quiet(_msg: str) -> None:
    pass


@dataclass
class LabNode:
    """One node of a lab (a systemd-nspawn container)."""

    name: str
    rank: int
    mgmt_ip: str
    device_ips: list[str]
    machine: str
    netns: str
    upper: Path
    nspawn_pid: int | None = None
    host_keys: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return lab_node.is_our_nspawn(self.nspawn_pid, self.machine)

    @property
    def leader_pid(self) -> int | None:
        return lab_node.leader_pid(self.nspawn_pid) if self.running else None

    def to_json(self) -> dict:
        return {"name": self.name, "rank": self.rank, "mgmt_ip": self.mgmt_ip,
                "device_ips": self.device_ips, "machine": self.machine, "netns": self.netns,
                "upper": str(self.upper), "nspawn_pid": self.nspawn_pid,
                "host_keys": self.host_keys}

    @classmethod
    def from_json(cls, data: dict) -> LabNode:
        return cls(name=data["name"], rank=data["rank"], mgmt_ip=data["mgmt_ip"],
                   device_ips=list(data["device_ips"]), machine=data["machine"],
                   netns=data["netns"], upper=Path(data["upper"]),
                   nspawn_pid=data.get("nspawn_pid"), host_keys=data.get("host_keys", {}))


class Lab:
    """A named lab. `Lab(name).up(...)` is idempotent; `down()` removes what up created."""

    def __init__(self, name: str = DEFAULT_NAME):
        self.name = registry.validate_name(name)
        self.state_dir = paths.lab_state_dir(name)
        self._record: dict | None = None

    # ---- record ---------------------------------------------------------------------
    @property
    def record_path(self) -> Path:
        return self.state_dir / "lab.json"

    def _load(self) -> dict | None:
        if self._record is None and self.record_path.exists():
            self._record = json.loads(self.record_path.read_text())
        return self._record

    def _save(self) -> None:
        assert self._record is not None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        provision.write_json(self.record_path, self._record)

    @property
    def exists(self) -> bool:
        return self._load() is not None

    @property
    def nodes(self) -> list[LabNode]:
        record = self._load()
        return [LabNode.from_json(n) for n in record["nodes"]] if record else []

    def node(self, name: str) -> LabNode:
        for candidate in self.nodes:
            if candidate.name == name:
                return candidate
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise InputError(f"no node {name!r} in lab {self.name!r} (nodes: {known})",
                         field="NODE")

    def _update_node(self, updated: LabNode) -> None:
        record = self._load()
        assert record is not None
        record["nodes"] = [updated.to_json() if n["name"] == updated.name else n
                           for n in record["nodes"]]
        self._save()

    @property
    def index(self) -> int:
        record = self._load()
        if not record:
            raise LabError(f"lab {self.name!r} is not up")
        return int(record["index"])

    @property
    def net(self) -> net.LabNet:
        return net.LabNet(self.index)

    @property
    def npus_per_node(self) -> int:
        return int(self._load()["npus_per_node"])  # type: ignore[index]

    @property
    def chip(self) -> str:
        return str(self._load()["chip"])  # type: ignore[index]

    @property
    def inventory_path(self) -> Path:
        return self.state_dir / "inventory.yaml"

    @property
    def model_dir(self) -> Path:
        """The lab's tiny model (built at `lab up`; the inventory's model.source)."""
        return self.state_dir / "model"

    @property
    def shared_dir(self) -> Path:
        """The host directory every node has at SHARED_DIR (removed by `down`)."""
        return self.state_dir / "shared"

    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "ssh" / "known_hosts"

    def ssh_argv(self, node: str, command: str | None = None) -> list[str]:
        """An OpenSSH command line to NODE with the lab key and strict host-key checking."""
        target = self.node(node)
        argv = ["ssh", "-i", str(self.ssh_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=10", "-o", "GlobalKnownHostsFile=/dev/null",
                f"root@{target.mgmt_ip}"]
        return argv + ([command] if command else [])

    # ---- up -------------------------------------------------------------------------
    def up(self, nodes: int = 2, npus_per_node: int = 8, chip: str = "910B3",
           progress: Progress | None = None, with_vllm: bool = True,
           engine: str = "host", replicas: int = 1, pd: bool = False) -> Lab:
        """`engine`: how the lab inventory runs vLLM: `host` (/opt/vllm on the nodes),
        `container` (the lab engine image, podman, from its archive), `venv` (a venv
        built on every node from the lab wheelhouse) or `standin` (the lab's stand-in
        for `vllm serve`, for tests whose subject is the orchestration: docs/lab.md). `replicas`: serving groups of
        nodes / replicas nodes each, behind nginx on node0 (docs/replicas.md). `pd`: prefill
        and decode disaggregated, one PD unit per pair of nodes (node 2k prefills, node
        2k+1 decodes), KV exchanged through the lab's shared directory (docs/lab.md)."""
        say = progress or _quiet
        if pd and replicas != 1:
            raise InputError("--pd makes one PD unit (serving group) of every pair of nodes; "
                             "drop --replicas", field="--pd")
        if pd and (nodes < 2 or nodes % 2):
            raise InputError(f"--pd needs an even number of nodes (a prefill and a decode "
                             f"node per PD unit), not {nodes}", field="--nodes")
        if replicas < 1 or nodes % replicas:
            raise InputError(f"{nodes} nodes do not make {replicas} serving groups of equal "
                             "size", field="--replicas")
        if engine not in ENGINE_KINDS:
            raise InputError(f"{engine!r} is not one of {', '.join(ENGINE_KINDS)}",
                             field="--engine")
        if engine in ("container", "venv") and not with_vllm:
            raise InputError("the container and venv engines are built from the vLLM layer; "
                             "drop --no-vllm", field="--engine")

        require_extra("lab", "ascendctl lab")   # the tiny model is built on this machine
        check_host()
        if chip not in sim_state.CHIPS:
            raise InputError(f"unsupported chip {chip!r} (one of {', '.join(sim_state.CHIPS)})",
                             field="--chip")
        if not 1 <= npus_per_node <= 16:
            raise InputError("must be between 1 and 16", field="--npus-per-node")
        record = self._load()
        if record and (record["node_count"] != nodes or record["npus_per_node"] != npus_per_node
                       or record["chip"] != chip):
            raise InputError(
                f"lab {self.name!r} is up with {record['node_count']} x {record['npus_per_node']}"
                f" {record['chip']}; run `ascendctl lab down --name {self.name}` first",
                field="--nodes")
        index = registry.allocate(self.name)
        lab_net = net.LabNet(index)
        if not 1 <= nodes <= lab_net.max_nodes(npus_per_node):
            raise InputError(f"must be between 1 and {lab_net.max_nodes(npus_per_node)}",
                             field="--nodes")
        started = time.monotonic()
        img = lab_image.ensure_image(say, with_vllm=with_vllm)
        if record is None:
            record = {"name": self.name, "index": index, "node_count": nodes,
                      "npus_per_node": npus_per_node, "chip": chip,
                      "roce_mtu": net.ROCE_MTU, "layers": [str(p) for p in img.layers],
                      "bridges": [lab_net.mgmt_bridge, lab_net.roce_bridge],
                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "faults": {},
                      "nodes": [LabNode(
                          name=f"node{r}", rank=r, mgmt_ip=lab_net.mgmt_ip(r),
                          device_ips=[lab_net.device_ip(r, p, npus_per_node)
                                      for p in range(npus_per_node)],
                          machine=f"ascendctl-{self.name}-node{r}",
                          netns=f"ascendctl-{self.name}-node{r}",
                          upper=self.state_dir / "nodes" / f"node{r}" / "upper").to_json()
                          for r in range(nodes)]}
            self._record = record
            self._save()
        key = provision.ensure_lab_key(self.state_dir / "ssh")
        say(f"lab {self.name!r}: networks {lab_net.mgmt_bridge} 198.18.{index}.0/24, "
            f"{lab_net.roce_bridge} 198.19.{index}.0/24")
        net.ensure_bridge(lab_net.mgmt_bridge, lab_net.mgmt_host_ip)
        net.ensure_bridge(lab_net.roce_bridge, lab_net.roce_host_ip)
        switch_mac = Path(f"/sys/class/net/{lab_net.roce_bridge}/address").read_text().strip()
        hosts = {n.name: n.mgmt_ip for n in self.nodes}
        layers = [Path(p) for p in record["layers"]]
        for lab_n in self.nodes:
            if lab_n.running:
                # Never write into the upper layer of a mounted overlay.
                continue
            lab_n.host_keys = provision.provision(
                lab_n.upper, node=lab_n.name, rank=lab_n.rank, chip=chip, npus=npus_per_node,
                device_ips=lab_n.device_ips, netmask=net.NETMASK,
                roce_host_ip=lab_net.roce_host_ip, hosts=hosts,
                authorized_key=Path(str(key) + ".pub").read_text(), switch_mac=switch_mac)
            modelinfo_cache.seed(lab_n.upper, layers)
            baseline = lab_n.upper.parent / "baseline-state.json"
            if not baseline.exists():
                shutil.copy(lab_n.upper / "etc/ascend-sim/state.json", baseline)
            self._update_node(lab_n)
        to_boot = [n for n in self.nodes if not n.running]
        if to_boot:
            say(f"booting {len(to_boot)} node(s): {', '.join(n.name for n in to_boot)}")
        for lab_n in to_boot:
            self._start_node(lab_n, layers)
        self._wait_nodes_ready(self.nodes, say)
        self._write_known_hosts()
        if not (self.model_dir / "model.safetensors.index.json").exists():
            build_model(self.model_dir)
        self._write_inventory(self._engine_section(engine, say), replicas, pd)
        say(f"lab {self.name!r} ready in {time.monotonic() - started:.1f}s; "
            f"inventory: {self.inventory_path}")
        return self

    def _start_node(self, lab_n: LabNode, layers: list[Path] | None = None) -> None:
        record = self._load()
        assert record is not None
        layers = layers or [Path(p) for p in record["layers"]]
        lab_net = self.net
        log = lab_n.upper.parent / "console.log"
        argv = lab_node.nspawn_argv(lab_n.machine, lab_n.name, layers, lab_n.upper,
                                    self._binds(lab_n, layers))
        lab_n.nspawn_pid = lab_node.start(lab_n.machine, argv, log)
        self._update_node(lab_n)
        leader = self._wait_leader(lab_n)
        # sshd listens on all addresses, so wiring the node while it boots is fine.
        net.attach_netns(lab_n.netns, leader)
        net.configure_mgmt(lab_net, lab_n.rank, lab_n.netns)
        net.configure_roce(lab_net, lab_n.rank, lab_n.netns, record["npus_per_node"],
                           record["roce_mtu"], dict(enumerate(lab_n.device_ips)))

    def _binds(self, lab_n: LabNode, layers: list[Path]) -> tuple[tuple[Path, str], ...]:
        """Host directories mounted into LAB_N: the lab's shared directory in every node,
        and the node's own podman storage when the image has podman."""
        self.shared_dir.mkdir(parents=True, exist_ok=True)
        self.shared_dir.chmod(0o755)
        binds: tuple[tuple[Path, str], ...] = ()
        if any(p.parent.name.startswith("podman-") for p in layers):
            storage = lab_n.upper.parent / "containers"
            storage.mkdir(parents=True, exist_ok=True)
            binds = ((storage, CONTAINER_STORAGE),)
        return binds + ((self.shared_dir, SHARED_DIR),)

    def _wait_leader(self, lab_n: LabNode, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while True:
            leader = lab_n.leader_pid
            if leader:
                return leader
            if not lab_n.running:
                log = lab_n.upper.parent / "console.log"
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                raise LabError(f"{lab_n.name}: systemd-nspawn exited; console log {log}:\n{tail}")
            if time.monotonic() > deadline:
                raise LabError(f"{lab_n.name}: container did not start within {timeout:.0f}s")
            time.sleep(0.05)

    def _wait_nodes_ready(self, nodes: Sequence[LabNode], say: Progress) -> None:
        def wait(lab_n: LabNode) -> str:
            self._wait_leader(self.node(lab_n.name))
            return lab_node.wait_running(lambda: self.node(lab_n.name).leader_pid)

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            states = dict(zip([n.name for n in nodes], pool.map(wait, nodes)))
        for name, state in states.items():
            if state != "running":
                failed = self.exec(name, ["systemctl", "--failed", "--no-legend"],
                                   check=False).stdout.strip()
                raise LabError(f"{name}: systemd is {state}; failed units: {failed}")
        say("nodes running: " + ", ".join(f"{n}" for n in states))

    def _write_known_hosts(self) -> None:
        lines = []
        for lab_n in self.nodes:
            scanned = provision.keyscan(lab_n.mgmt_ip)
            expected = {v.split()[1] for v in lab_n.host_keys.values()}
            got = {ln.split()[2] for ln in scanned if len(ln.split()) >= 3}
            if not expected or expected != got:
                raise LabError(f"{lab_n.name}: sshd on {lab_n.mgmt_ip} presented host keys "
                               "that differ from the ones provisioned (or none)")
            lines += scanned
        self.known_hosts.write_text("\n".join(sorted(lines)) + "\n")
        self.known_hosts.chmod(0o600)

    def _engine_section(self, engine: str, say: Progress) -> str | dict:
        if engine == "container":
            built = build_engine_image(progress=say)
            return {"kind": "container", "runtime": "podman", "image": built.image,
                    "archive": str(built.archive), "command": ENGINE_COMMAND}
        if engine == "venv":
            return {"kind": "venv", "wheelhouse": str(build_wheelhouse(say)),
                    "command": "vllm"}
        if engine == "standin":
            say("installing the stand-in engine on every node")
            for node in self.nodes:
                standin_install.install(self, node.name)
            return standin_install.ENGINE_PATH
        return f"{lab_image.VLLM_DIR}/bin/vllm"

    @property
    def api_key_file(self) -> Path:
        """The API key of a lab with replicas or PD units (0600; the inventory names the
        file)."""
        return self.state_dir / "api-key"

    def _write_inventory(self, engine: str | dict, replicas: int = 1, pd: bool = False) -> None:
        key_file = None
        if replicas > 1 or pd:
            key_file = self.api_key_file
            if not key_file.exists():
                import secrets

                fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write("sk-lab-" + secrets.token_hex(16) + "\n")

        data = inventory.build(
            name=self.name, chip=self.chip, npus=self.npus_per_node,
            roce_mtu=int(self._load()["roce_mtu"]), netmask=net.NETMASK,  # type: ignore[index]
            key=self.ssh_key, known_hosts=self.known_hosts, roce_gateway=self.net.roce_host_ip,
            model_dir=self.model_dir, engine=engine, replicas=replicas, pd=pd,
            api_key_file=key_file,
            versions={"driver": sim_state.DEFAULT_DRIVER["Version"],
                      "firmware": sim_state.DEFAULT_FIRMWARE["Version"],
                      "cann": sim_state.DEFAULT_TOOLKIT["version"], "python": "3.11",
                      "vllm": lab_image.VLLM_VERSION},
            nodes=[{"name": n.name, "rank": n.rank, "mgmt_ip": n.mgmt_ip,
                    "nic": net.MGMT_IFNAME, "device_ips": n.device_ips} for n in self.nodes])
        inventory.write(self.inventory_path, data)

    # ---- down -----------------------------------------------------------------------
    def down(self, progress: Progress | None = None) -> None:
        say = progress or _quiet
        check_host()
        record = self._load()
        if record is None:
            registry.release(self.name)
            return
        nodes = self.nodes
        say(f"stopping {len(nodes)} node(s) of lab {self.name!r}")
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            list(pool.map(lambda n: lab_node.stop(n.nspawn_pid, n.machine), nodes))
        lab_net = net.LabNet(int(record["index"]))
        layers = [Path(p) for p in record["layers"]]
        for lab_n in nodes:
            self._cleanup_node_host_side(lab_n, lab_net)
            modelinfo_cache.harvest(lab_n.upper, layers)
        for bridge in record.get("bridges", []):
            net.delete_link(bridge)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        registry.release(self.name)
        self._record = None
        say(f"lab {self.name!r} removed")

    def _cleanup_node_host_side(self, lab_n: LabNode, lab_net: LabNet) -> None:
        upper = str(lab_n.upper)
        # nspawn unmounts its overlay when it exits; a leftover one would pin the upper dir.
        for line in Path("/proc/mounts").read_text().splitlines():
            target = line.split()[1]
            if upper in line and target != "/":
                run(["umount", "-l", target], check=False)
        net.delete_netns(lab_n.netns)
        net.delete_link(lab_net.host_mgmt_veth(lab_n.rank))
        for port in range(self.npus_per_node):
            net.delete_link(lab_net.host_roce_veth(lab_n.rank, port))
        lab_node.remove_cgroups(lab_n.machine)
        # nspawn removes its per-machine propagation directory on a clean exit only.
        propagate = Path("/run/systemd/nspawn/propagate") / lab_n.machine
        if propagate.is_dir() and not any(propagate.iterdir()):
            propagate.rmdir()

    # ---- node power (used by faults) ---------------------------------------------------
    def power_off(self, name: str) -> None:
        lab_n = self.node(name)
        lab_node.stop(lab_n.nspawn_pid, lab_n.machine)
        self._cleanup_node_host_side(lab_n, self.net)
        lab_n.nspawn_pid = None
        self._update_node(lab_n)

    def power_on(self, name: str) -> None:
        lab_n = self.node(name)
        if lab_n.running:
            return
        lab_node.remove_cgroups(lab_n.machine)
        self._start_node(lab_n)
        self._wait_nodes_ready([self.node(name)], _quiet)

    # ---- exec / status ----------------------------------------------------------------
    def exec(self, node: str, argv_or_cmd: Sequence[str] | str, check: bool = True,
             timeout: float | None = 60, input: str | bytes | None = None
             ) -> subprocess.CompletedProcess:
        """Run a command inside NODE (via nsenter: works with sshd down)."""
        lab_n = self.node(node)
        leader = lab_n.leader_pid
        if not leader:
            raise LabError(f"{node} is not running")
        argv = ["bash", "-c", argv_or_cmd] if isinstance(argv_or_cmd, str) else list(argv_or_cmd)
        return lab_node.exec_in(leader, argv, check=check, timeout=timeout, input=input)

    def status(self) -> dict:
        record = self._load()
        if record is None:
            return {"name": self.name, "up": False, "nodes": []}
        nodes = []
        for lab_n in self.nodes:
            state = "stopped"
            if lab_n.running and lab_n.leader_pid:
                proc = lab_node.exec_in(lab_n.leader_pid, ["systemctl", "is-system-running"],
                                        check=False, timeout=20)
                state = proc.stdout.strip() or "unknown"
            nodes.append({"name": lab_n.name, "rank": lab_n.rank, "mgmt_ip": lab_n.mgmt_ip,
                          "device_ips": lab_n.device_ips, "system": state,
                          "leader_pid": lab_n.leader_pid,
                          "faults": record.get("faults", {}).get(lab_n.name, [])})
        return {"name": self.name, "up": True, "index": record["index"],
                "chip": record["chip"], "npus_per_node": record["npus_per_node"],
                "inventory": str(self.inventory_path), "state_dir": str(self.state_dir),
                "ssh_key": str(self.ssh_key), "known_hosts": str(self.known_hosts),
                "nodes": nodes}

    # ---- faults ---------------------------------------------------------------------
    def fault(self, node: str, kind: str, value: str | None = None) -> str:
        message = faults.inject(self, node, kind, value)
        record = self._load()
        assert record is not None
        record.setdefault("faults", {}).setdefault(node, []).append(
            kind if value is None else f"{kind}={value}")
        self._save()
        return message

    def heal(self, node: str | None = None) -> list[str]:
        names = [node] if node else [n.name for n in self.nodes]
        for name in names:
            self.node(name)
        for name in names:
            faults.heal(self, name)
            record = self._load()
            assert record is not None
            record.setdefault("faults", {}).pop(name, None)
            self._save()
        return names
