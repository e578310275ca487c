"""OpenSSH for bulk data: command lines, a temporary agent, relay host keys.

Weights move through `ssh` subprocesses (Paramiko is several times slower for bulk
data). The relay's node-to-node hops authenticate with the inventory key through a
temporary `ssh-agent` forwarded along the chain (the key never leaves the jump host),
and verify host keys against a known_hosts file assembled from the jump host's own
verified entries — so every hop is as strictly checked as the first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from ascendctl.errors import AscendctlError

PREFERRED_CIPHERS = ("aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,"
                     "aes256-gcm@openssh.com,aes128-ctr")


def ssh_destination(host) -> list[str]:
    return ["-p", str(host.ssh.port), "-l", host.ssh.user, host.address]


def ssh_options(host, *, forward_agent: bool = False) -> list[str]:
    """Options for `ssh` from the jump host to `host`, following the inventory."""
    spec = host.ssh
    strict = "yes" if spec.host_key_checking == "strict" else "accept-new"
    argv = ["-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={strict}",
            "-o", f"UserKnownHostsFile={os.path.expanduser(spec.known_hosts)}",
            "-o", f"ConnectTimeout={int(spec.connect_timeout)}",
            "-o", f"Ciphers={PREFERRED_CIPHERS}", "-o", "LogLevel=ERROR",
            "-o", "ServerAliveInterval=15"]
    if spec.private_key:
        argv += ["-i", os.path.expanduser(spec.private_key), "-o", "IdentitiesOnly=yes"]
    if spec.jump_host:
        argv += ["-J", spec.jump_host]
    argv.append("-A" if forward_agent else "-a")
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


# The agent lives exactly as long as the push: a shell holds it and waits on a pipe
# whose other end only the push holds. When the push ends — normally, on Ctrl-C, or
# killed with SIGKILL — the pipe closes, `cat` returns and the agent is stopped.
# (PR_SET_PDEATHSIG would not do: ssh-agent is setgid, and exec of a setgid program
# clears it.)
AGENT_KEEPER = ('ssh-agent -D -a "$1" </dev/null >/dev/null 2>&1 & agent=$!; '
                'echo "$agent"; cat >/dev/null; kill "$agent" 2>/dev/null; wait "$agent"')


def _remove_stale_agent_dirs(min_age: float = 60.0) -> None:
    """Empty directories left by pushes that were killed (their agent removed its socket
    when it ended with them). Only empty ones: a live agent's socket keeps its own."""
    import glob
    import time

    for path in glob.glob(os.path.join(tempfile.gettempdir(), "ascendctl-agent-*")):
        try:
            if time.time() - os.stat(path).st_mtime > min_age:
                os.rmdir(path)
        except OSError:
            pass


class TemporaryAgent:
    """An ssh-agent of our own holding only the inventory key, for the push's duration."""

    def __init__(self) -> None:
        _remove_stale_agent_dirs()
        self.dir = tempfile.mkdtemp(prefix="ascendctl-agent-")
        os.chmod(self.dir, 0o700)
        self.socket = str(Path(self.dir) / "agent.sock")
        self.proc: subprocess.Popen | None = None
        self.agent_pid = 0

    def start(self, keys: list[str]) -> "TemporaryAgent":
        import time

        self.proc = subprocess.Popen(["sh", "-c", AGENT_KEEPER, "sh", self.socket],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stdout is not None
        self.agent_pid = int(self.proc.stdout.readline().strip() or 0)
        for _ in range(250):
            if os.path.exists(self.socket):
                break
            if self.proc.poll() is not None:
                raise AscendctlError("ssh-agent exited at start")
            time.sleep(0.02)
        for key in keys:
            proc = subprocess.run(["ssh-add", "-q", os.path.expanduser(key)],
                                  env=self.env(), capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, check=False)
            if proc.returncode != 0:
                self.stop()
                raise AscendctlError(f"ssh-add {key} failed: "
                                     f"{proc.stderr.strip() or proc.returncode} (a key with "
                                     "a passphrase needs your own ssh-agent: leave "
                                     "ssh.private_key unset and load it with ssh-add)")
        return self

    def env(self) -> dict[str, str]:
        return {**os.environ, "SSH_AUTH_SOCK": self.socket}

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()          # the keeper stops the agent
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                if self.agent_pid:
                    try:
                        os.kill(self.agent_pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
        self.proc = None
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def __enter__(self) -> "TemporaryAgent":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def agent_for(hosts) -> TemporaryAgent | None:
    """A temporary agent with the inventory keys, or None to use the operator's agent."""
    keys = sorted({h.ssh.private_key for h in hosts if h.ssh.private_key})
    if not keys:
        if not os.environ.get("SSH_AUTH_SOCK"):
            raise AscendctlError("the relay between nodes needs a key: set ssh.private_key "
                                 "in the inventory or load your key into ssh-agent")
        return None
    return TemporaryAgent().start(keys)
