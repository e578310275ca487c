"""What a node gets at `lab up`, written into its writable layer before it first boots:
the simulated Ascend stack and its state, /etc/hccn.conf, its own SSH host keys, the
lab's authorized key, /etc/hosts. Nothing of this is baked into the shared image, so
changing the simulator never rebuilds the image."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ascendctl_lab.hostcmd import run
from ascendctl_lab.sim import state as sim_state

SIM_DIR = Path(__file__).resolve().parent / "sim"
SIM_MODULES = ("__init__.py", "state.py", "npu_smi.py", "hccn_tool.py", "files.py", "lspci.py")
NODE_SIM_LIB = "usr/local/lib/ascend-sim"

WRAPPERS = {
    "usr/local/sbin/npu-smi": "npu_smi",
    "usr/local/Ascend/driver/tools/hccn_tool": "hccn_tool",
    "usr/bin/lspci": "lspci",
    "usr/local/sbin/ascend-sim": "files",
}

DRIVER_DIRS = ("usr/local/dcmi", "usr/local/Ascend/driver/lib64")

SIM_UNIT = """[Unit]
Description=Simulated Ascend driver: version files and /dev/davinci* from the node state
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/ascend-sim sync

[Install]
WantedBy=sysinit.target
"""

SSHD_HOSTKEYS = """HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
"""


def wrapper(module: str) -> str:
    return ("#!/usr/bin/python3 -IS\n"
            "import sys\n"
            f"sys.path.insert(0, '/{NODE_SIM_LIB}')\n"
            f"from ascend_sim.{module} import main\n"
            "sys.exit(main())\n")


def hccn_conf(addresses: Sequence[str | None], netmask: str, detect: str, gateway: str) -> str:
    lines = []
    for port, address in enumerate(addresses):
        if address:
            lines += [f"address_{port}={address}", f"netmask_{port}={netmask}"]
        lines += [f"netdetect_{port}={detect}", f"gateway_{port}={gateway}",
                  f"send_arp_status_{port}=1"]
    return "\n".join(lines) + "\n"


def install_simulator(upper: Path) -> None:
    """Copy the simulator package and its tool wrappers (re-run on every `lab up`)."""
    lib = upper / NODE_SIM_LIB / "ascend_sim"
    lib.mkdir(parents=True, exist_ok=True)
    for module in SIM_MODULES:
        shutil.copy(SIM_DIR / module, lib / module)
    for path, module in WRAPPERS.items():
        target = upper / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(wrapper(module))
        target.chmod(0o755)
    # The driver's tools directory is not on PATH; real installs add it to the operator's
    # environment. A link in /usr/local/bin makes `hccn_tool` work in non-login SSH too.
    link_bin = upper / "usr/local/bin/hccn_tool"
    link_bin.parent.mkdir(parents=True, exist_ok=True)
    if not link_bin.is_symlink():
        link_bin.symlink_to("/usr/local/Ascend/driver/tools/hccn_tool")
    # The driver paths the vllm-ascend container run mounts (`-v` of a missing source
    # fails the run): the DCMI library directory, the driver's lib64, and npu-smi where
    # real installs put it (the simulator's lives in /usr/local/sbin).
    for directory in DRIVER_DIRS:
        (upper / directory).mkdir(parents=True, exist_ok=True)
    npu_smi = upper / "usr/local/bin/npu-smi"
    if not npu_smi.is_symlink():
        npu_smi.symlink_to("/usr/local/sbin/npu-smi")
    unit = upper / "etc/systemd/system/ascend-sim.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(SIM_UNIT)
    wants = upper / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "ascend-sim.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/ascend-sim.service")


def generate_host_keys(upper: Path) -> dict[str, str]:
    """Fresh host keys for this node; returns {key type: public key line}."""
    ssh = upper / "etc/ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    pubs = {}
    for kind in ("ed25519", "ecdsa"):
        key = ssh / f"ssh_host_{kind}_key"
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(key)])
        key.chmod(0o600)
        pubs[kind] = (ssh / f"ssh_host_{kind}_key.pub").read_text().strip()
    conf = ssh / "sshd_config.d/ascendctl-hostkeys.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(SSHD_HOSTKEYS)
    return pubs


def provision(upper: Path, *, node: str, rank: int, chip: str, npus: int,
              device_ips: list[str], netmask: str, roce_host_ip: str, hosts: dict[str, str],
              authorized_key: str, switch_mac: str) -> dict[str, str]:
    """First-boot content of one node. Returns the node's host public keys."""
    upper.mkdir(parents=True, exist_ok=True)
    install_simulator(upper)
    state_file = upper / "etc/ascend-sim/state.json"
    if not state_file.exists():
        state = sim_state.default_state(node=node, chip=chip, npus=npus)
        state["roce"].update({"switch_ip": roce_host_ip, "switch_mac": switch_mac})
        now = time.time()
        state["link_history"] = {str(i): [{"time": now, "up": True}] for i in range(npus)}
        sim_state.save(state, str(state_file))
        (upper / "etc/hccn.conf").write_text(hccn_conf(list(device_ips), netmask,
                                                       roce_host_ip, roce_host_ip))
    pubs = generate_host_keys(upper)
    root_ssh = upper / "root/.ssh"
    root_ssh.mkdir(parents=True, exist_ok=True)
    root_ssh.chmod(0o700)
    (root_ssh / "authorized_keys").write_text(authorized_key.strip() + "\n")
    (root_ssh / "authorized_keys").chmod(0o600)
    (upper / "etc/hostname").write_text(node + "\n")
    (upper / "etc/hosts").write_text(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        + "".join(f"{ip}\t{name}\n" for name, ip in hosts.items()))
    machine_id = upper / "etc/machine-id"
    if not machine_id.exists() or not machine_id.read_text().strip():
        machine_id.write_text(secrets.token_hex(16) + "\n")
    (upper / "var/lib/ascendctl").mkdir(parents=True, exist_ok=True)
    return pubs


def ensure_lab_key(ssh_dir: Path) -> Path:
    ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    key = ssh_dir / "id_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ascendctl-lab",
             "-f", str(key)])
    key.chmod(0o600)
    return key


def keyscan(address: str, timeout: float = 30) -> list[str]:
    """Host keys as the node's sshd presents them (`ssh-keyscan`), retried until up."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(["ssh-keyscan", "-T", "3", "-t", "ed25519,ecdsa", address],
                              capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("#")]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.5)


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
