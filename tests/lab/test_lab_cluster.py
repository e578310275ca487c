"""The lab's nodes are real: SSH with the lab key and strict host keys, systemd running,
both networks reachable, the simulated Ascend tools at their real paths."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


def ssh(lab, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(lab.ssh_argv(node, command), capture_output=True, text=True,
                          timeout=timeout)


def test_ssh_with_lab_key_and_strict_host_keys(lab):
    for node in lab.nodes:
        proc = ssh(lab, node.name, "hostname; systemctl is-system-running")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [node.name, "running"]


def test_a_wrong_host_key_is_refused(lab, tmp_path):
    other = lab.nodes[1]
    forged = tmp_path / "known_hosts"
    lines = lab.known_hosts.read_text().splitlines()
    # node0's keys recorded under node1's address: OpenSSH must refuse to connect.
    node0_keys = [ln.split(" ", 1)[1] for ln in lines if ln.startswith(lab.nodes[0].mgmt_ip + " ")]
    forged.write_text("".join(f"{other.mgmt_ip} {key}\n" for key in node0_keys))
    argv = [a.replace(str(lab.known_hosts), str(forged)) for a in lab.ssh_argv(other.name, "true")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in proc.stderr or "verification failed" in proc.stderr


def test_nodes_reach_each_other_on_both_networks(lab):
    node0, node1 = lab.nodes[:2]
    out = lab.exec(node0.name, ["ping", "-c", "1", "-W", "2", node1.mgmt_ip], check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    for port in (0, lab.npus_per_node - 1):
        proc = lab.exec(node0.name, ["ping", "-c", "1", "-W", "2", "-I", node0.device_ips[port],
                                     node1.device_ips[port]], check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # hccn_tool pings from the NPU's port: the other node's device IP answers.
    out = lab.exec(node1.name, ["hccn_tool", "-i", "3", "-ping", "-g", "address",
                                node0.device_ips[3]]).stdout
    assert "3 packets transmitted, 3 received, 0.00% packet loss" in out


def test_each_port_carries_its_own_device_ip(lab):
    node = lab.nodes[0]
    out = lab.exec(node.name, ["ip", "-j", "addr"]).stdout
    by_if = {link["ifname"]: [a["local"] for a in link.get("addr_info", [])
                              if a["family"] == "inet"] for link in json.loads(out)}
    for port, address in enumerate(node.device_ips):
        assert by_if[f"eth{port}"] == [address]
        assert lab.exec(node.name, ["hccn_tool", "-i", str(port), "-ip", "-g"]).stdout == \
            f"ipaddr:{address}\nnetmask:255.255.255.0\n"
    assert by_if["host0"] == [node.mgmt_ip]


def test_simulated_stack_at_the_real_paths(lab):
    node = lab.nodes[0].name
    out = ssh(lab, node, "/usr/local/sbin/npu-smi info").stdout
    assert out.count("910B3") == lab.npus_per_node and "| OK            |" in out
    assert len(out.splitlines()[0]) == 98
    listing = lab.exec(node, "ls /dev/davinci* /dev/devmm_svm /dev/hisi_hdc").stdout.split()
    assert {f"/dev/davinci{i}" for i in range(8)} | {"/dev/davinci_manager"} <= set(listing)
    for path in ("/usr/local/Ascend/driver/version.info",
                 "/usr/local/Ascend/firmware/version.info",
                 "/usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info",
                 "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
                 "/etc/hccn.conf", "/etc/ascend_install.info",
                 "/usr/local/Ascend/driver/tools/hccn_tool"):
        assert lab.exec(node, ["test", "-e", path], check=False).returncode == 0, path
    assert lab.exec(node, ["/opt/vllm/bin/python", "-c", "import vllm; print(vllm.__version__)"],
                    timeout=180).stdout.strip().startswith("0.32.0")


def test_inventory_is_accepted_by_inventory_check(lab):
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                           str(lab.inventory_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import yaml

    data = yaml.safe_load(lab.inventory_path.read_text())
    hosts = data["all"]["children"]["nodes"]["hosts"]
    assert [h["ansible_host"] for h in hosts.values()] == [n.mgmt_ip for n in lab.nodes]
    assert data["all"]["vars"]["ssh"]["host_key_checking"] == "strict"


def test_up_again_is_idempotent(lab):
    pids = [n.nspawn_pid for n in lab.nodes]
    started = time.monotonic()
    lab.up(nodes=len(pids), npus_per_node=lab.npus_per_node, chip=lab.chip)
    assert time.monotonic() - started < 30
    assert [n.nspawn_pid for n in lab.nodes] == pids


def test_cli_status_and_exec(lab):
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "lab", "status", "--json",
                           "--name", lab.name], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert [n["system"] for n in status["nodes"]] == ["running", "running"]
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "lab", "exec", "--name", lab.name,
                           "node1", "--", "hccn_tool", "-i", "0", "-link", "-g"],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "link status: UP\n")
