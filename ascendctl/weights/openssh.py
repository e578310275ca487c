"""OpenSSH for bulk data: command lines and the relay's host keys.

Weights move through `ssh` subprocesses (Paramiko is several times slower for bulk
data). Host keys follow the one policy of the Paramiko transport (transport/hostkeys.py):
only the inventory's known_hosts file is trusted (never also /etc/ssh/ssh_known_hosts or
~/.ssh/known_hosts), strict unless `accept-new`. The relay's node-to-node hops check
host keys against a known_hosts file assembled from the jump host's own verified entries,
and authenticate with keys made for the push (hopkeys.py): no agent is ever forwarded.
"""

from __future__ import annotations

import os
import subprocess

from ascendctl.errors import AscendctlError

PREFERRED_CIPHERS = ("aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,"
                     "aes256-gcm@openssh.com,aes128-ctr")


def ssh_destination(host) -> list[str]:
    """Port, login and then the host after `--`: an address can never be an option
    (the inventory refuses a leading dash too). The remote command follows."""
    return ["-p", str(host.ssh.port), "-l", host.ssh.user, "--", host.address]


def host_key_options(spec) -> list[str]:
    """The host-key policy as OpenSSH options: the inventory's file only."""
    strict = "yes" if spec.host_key_checking == "strict" else "accept-new"
    return ["-o", f"StrictHostKeyChecking={strict}",
            "-o", f"UserKnownHostsFile={os.path.expanduser(spec.known_hosts)}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "CheckHostIP=no"]


def ssh_options(host) -> list[str]:
    """Options for `ssh` from the jump host to `host`, following the inventory. Never
    forwards the agent (-a), X11 or ports."""
    spec = host.ssh
    argv = ["-o", "BatchMode=yes", *host_key_options(spec),
            "-o", f"ConnectTimeout={int(spec.connect_timeout)}",
            "-o", f"Ciphers={PREFERRED_CIPHERS}", "-o", "LogLevel=ERROR",
            "-o", "ServerAliveInterval=15", "-o", "ForwardAgent=no",
            "-o", "ClearAllForwardings=yes"]
    if spec.private_key:
        argv += ["-i", os.path.expanduser(spec.private_key), "-o", "IdentitiesOnly=yes"]
    if spec.jump_host:
        argv += ["-J", spec.jump_host]
    argv += ["-a", "-x", "-T"]
    return argv


def known_hosts_entry_name(host) -> str:
    return host.address if host.ssh.port == 22 else f"[{host.address}]:{host.ssh.port}"


def relay_known_hosts(hosts) -> str:
    """known_hosts lines for `hosts`, taken from the jump host's verified known_hosts."""
    lines: list[str] = []
    for host in hosts:
        path = os.path.expanduser(host.ssh.known_hosts)
        name = known_hosts_entry_name(host)
        proc = subprocess.run(["ssh-keygen", "-F", name, "-f", path], capture_output=True,
                              text=True, check=False)
        found = [line for line in proc.stdout.splitlines()
                 if line.strip() and not line.startswith("#")]
        if not found:
            raise AscendctlError(f"{host.name}: no host key for {name} in {path}; the relay "
                                 "between nodes checks host keys against the jump host's "
                                 "known_hosts (connect once with ssh, or ssh-keyscan and "
                                 "verify)")
        lines.extend(found)
    return "\n".join(dict.fromkeys(lines)) + "\n"
