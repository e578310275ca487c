"""One host-key policy for both transports, against the lab's real sshd (issue 13).

A known_hosts with hashed names, an @cert-authority line, an unrelated @revoked key, a
line of garbage and no final newline works for Paramiko (the control connections) and
OpenSSH (the weights path) alike; revoking a node's key makes both refuse that node."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


def node_keys(known_hosts: Path, address: str) -> list[str]:
    """Every `keytype base64` the file lists for `address` (sshd has several)."""
    keys = [" ".join(parts[1:3]) for parts in map(str.split, known_hosts.read_text()
                                                  .splitlines())
            if parts and address in parts[0].split(",")]
    assert keys, f"{address} not in {known_hosts}"
    return keys


def connect_both(inv) -> dict[str, tuple[bool, str, bool, str]]:
    """host → (paramiko ok, its error, openssh ok, its stderr)."""
    from ascendctl.transport import SshPool
    from ascendctl.weights.openssh import ssh_destination, ssh_options

    out = {}
    with SshPool(inv.hosts) as pool:
        results = pool.map(lambda conn: conn.run(["true"]).check(), inv.host_names)
    for host in inv.hosts:
        proc = subprocess.run(["ssh", *ssh_options(host), *ssh_destination(host), "true"],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        result = results[host.name]
        out[host.name] = (result.status == "ok", str(result.error), proc.returncode == 0,
                          proc.stderr)
    return out


def test_both_transports_share_one_known_hosts_policy(lab, tmp_path, monkeypatch):
    from ascendctl.load import load_inventory

    source = Path(lab.known_hosts)
    hashed = tmp_path / "hashed"
    hashed.write_text(source.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed)], check=True, capture_output=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ca")],
                   check=True)
    ca = " ".join((tmp_path / "ca.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.example {ca}\n@revoked *.example {ca}\n"
                     "this is not a known_hosts entry\n" + hashed.read_text().rstrip("\n"))
    monkeypatch.setenv("ASCENDCTL_KNOWN_HOSTS", str(known))
    inv = load_inventory(lab.inventory_path)
    assert all(h.ssh.known_hosts == str(known) for h in inv.hosts)
    for name, (paramiko_ok, error, openssh_ok, stderr) in connect_both(inv).items():
        assert paramiko_ok, (name, error)          # no "InvalidHostKey"
        assert openssh_ok, (name, stderr)

    node1 = inv.host("node1")
    with known.open("a") as handle:                # the file has no final newline
        handle.write("\n" + "".join(f"@revoked * {key}\n"
                                     for key in node_keys(source, node1.address)))
    outcome = connect_both(inv)
    assert outcome["node0"][0] and outcome["node0"][2]
    paramiko_ok, error, openssh_ok, stderr = outcome["node1"]
    assert not paramiko_ok and "@revoked" in error
    assert not openssh_ok and "REVOKED" in stderr.upper()
