"""The relay's temporary agent never outlives the push; relay host keys come only from
the jump host's known_hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ascendctl.errors import AscendctlError
from ascendctl.weights.openssh import TemporaryAgent, relay_known_hosts, ssh_options


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)
    return path


def test_agent_holds_the_key_and_stops_with_its_directory(key):
    agent = TemporaryAgent().start([str(key)])
    listed = subprocess.run(["ssh-add", "-l"], env=agent.env(), capture_output=True,
                            text=True)
    assert listed.returncode == 0 and "ED25519" in listed.stdout
    pid, directory = agent.agent_pid, agent.dir
    agent.stop()
    time.sleep(0.2)
    assert not alive(pid) and not os.path.exists(directory)


def test_agent_ends_when_the_push_is_killed(key):
    code = ("from ascendctl.weights.openssh import TemporaryAgent; import time; "
            f"a = TemporaryAgent().start([{str(key)!r}]); print(a.agent_pid, a.dir, flush=True); "
            "time.sleep(120)")
    push = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid_text, directory = push.stdout.readline().split()
    pid = int(pid_text)
    assert alive(pid)
    push.kill()
    push.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    assert not alive(pid)
    os.rmdir(directory)      # left empty; the next push's agent would remove it too


def host(name, address, port, known_hosts):
    ssh = SimpleNamespace(port=port, user="root", known_hosts=str(known_hosts),
                          host_key_checking="strict", connect_timeout=10,
                          private_key=None, jump_host=None)
    return SimpleNamespace(name=name, address=address, ssh=ssh)


def test_relay_known_hosts_copies_verified_entries_only(tmp_path, key):
    public = (tmp_path / "id_ed25519.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"198.18.9.11 {public[0]} {public[1]}\n"
                     f"[198.18.9.12]:2222 {public[0]} {public[1]}\n"
                     f"198.18.9.99 {public[0]} {public[1]}\n")
    text = relay_known_hosts([host("a", "198.18.9.11", 22, known),
                              host("b", "198.18.9.12", 2222, known)])
    assert "198.18.9.11 " in text and "[198.18.9.12]:2222 " in text
    assert "198.18.9.99" not in text
    with pytest.raises(AscendctlError, match="no host key for 198.18.9.13"):
        relay_known_hosts([host("c", "198.18.9.13", 22, known)])


def test_first_hop_checks_host_keys_strictly(tmp_path):
    argv = ssh_options(host("a", "198.18.9.11", 22, tmp_path / "kh"), forward_agent=True)
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert f"UserKnownHostsFile={tmp_path / 'kh'}" in argv and "-A" in argv
