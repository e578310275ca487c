"""OpenSSH command lines: no agent forwarding, `--` before every host, one host-key
policy (the inventory's file only); relay host keys come only from the jump host's
known_hosts; hop keys are restricted, expire and are removed."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from ascendctl.errors import AscendctlError
from ascendctl.weights.openssh import relay_known_hosts, ssh_destination, ssh_options


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)
    return path


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


def test_first_hop_checks_host_keys_strictly_and_forwards_nothing(tmp_path):
    argv = ssh_options(host("a", "198.18.9.11", 22, tmp_path / "kh"))
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert f"UserKnownHostsFile={tmp_path / 'kh'}" in argv
    # the same files as the Paramiko transport: never also /etc/ssh/ssh_known_hosts
    assert "GlobalKnownHostsFile=/dev/null" in argv
    assert "-A" not in argv and "-a" in argv and "ForwardAgent=no" in argv


def test_host_comes_after_double_dash():
    target = host("a", "198.18.9.11", 2222, "/dev/null")
    assert ssh_destination(target) == ["-p", "2222", "-l", "root", "--", "198.18.9.11"]


def spec(**extra):
    base = {"name": "n1", "host": "198.18.9.12", "port": 22, "user": "root",
            "python": "/usr/bin/python3", "helper": "/var/lib/ascendctl/bin/weights_node.py",
            "root": "/var/lib/ascendctl", "sudo": False,
            "known_hosts": "/var/lib/ascendctl/tmp/relay_known_hosts",
            "identity": "/var/lib/ascendctl/tmp/relay-keys/p/c0h0", "connect_timeout": 10,
            "next": None}
    return base | extra


def test_node_hop_uses_its_hop_key_and_no_agent():
    from ascendctl.weights.nodehelper import helper_module

    argv = helper_module().hop_argv(spec(sudo=True))
    assert "-A" not in argv and "-a" in argv and "IdentityAgent=none" in argv
    assert argv[argv.index("-i") + 1] == "/var/lib/ascendctl/tmp/relay-keys/p/c0h0"
    assert argv[argv.index("--") + 1] == "198.18.9.12"
    remote = argv[-1]
    assert remote.startswith("sudo -n -- /usr/bin/python3 ") and "SSH_AUTH_SOCK" not in remote


def test_hop_command_is_the_forced_command():
    """What the upstream asks for and what the downstream's authorized_keys forces are
    one string, built by one function."""
    from ascendctl.weights.nodehelper import helper_module
    from ascendctl.weights.relay import NodeAccess, chain_specs

    def access(name, address):
        ssh = SimpleNamespace(port=22, user="root", uses_sudo=False, connect_timeout=10)
        return NodeAccess(host=SimpleNamespace(name=name, address=address, ip=address, ssh=ssh),
                          root="/var/lib/ascendctl", python="/usr/bin/python3",
                          helper="/var/lib/ascendctl/bin/weights_node.py")

    chain = [access("n0", "198.18.9.11"), access("n1", "198.18.9.12"),
             access("n2", "198.18.9.13")]
    first_spec, hops = chain_specs(chain, "push1", 3)
    assert [(h.upstream.name, h.downstream.name) for h in hops] == [("n0", "n1"), ("n1", "n2")]
    assert [h.key_rel for h in hops] == ["tmp/relay-keys/push1/c3h0",
                                         "tmp/relay-keys/push1/c3h1"]
    module = helper_module()
    assert module.hop_remote(first_spec) == hops[0].command
    assert module.hop_remote(first_spec["next"]) == hops[1].command
    assert first_spec["identity"] == "/var/lib/ascendctl/tmp/relay-keys/push1/c3h0"


@pytest.fixture
def authorized_keys(tmp_path, monkeypatch):
    from ascendctl.weights.nodehelper import helper_module

    module = helper_module()
    path = tmp_path / "home" / ".ssh" / "authorized_keys"
    path.parent.mkdir(parents=True)
    path.write_text("ssh-ed25519 AAAAoperator operator@desk")      # no final newline
    path.chmod(0o600)
    monkeypatch.setattr(module, "_authorized_keys_of",
                        lambda user: (str(path), os.getuid(), os.getgid()))
    return module, path


def test_authorize_restricts_and_deauthorize_removes(authorized_keys, key, capfd):
    module, path = authorized_keys
    public = (key.parent / (key.name + ".pub")).read_text().split()
    entry = {"public_key": f"{public[0]} {public[1]}",
             "command": "/usr/bin/python3 /x/weights_node.py --root /x --name n1 relay",
             "from": ["198.18.9.11"]}
    module.cmd_authorize({"push": "p1", "user": "root", "ttl": 3600, "entries": [entry]})
    lines = path.read_text().splitlines()
    assert lines[0] == "ssh-ed25519 AAAAoperator operator@desk"      # kept, not corrupted
    assert lines[1].startswith('restrict,command="/usr/bin/python3 /x/weights_node.py '
                               '--root /x --name n1 relay",from="198.18.9.11",expiry-time="')
    assert lines[1].endswith(f"{public[0]} {public[1]} ascendctl-relay-p1")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    # a line of a push that died long ago has expired: the next push removes it
    with path.open("a") as handle:
        handle.write('restrict,command="x",from="1.2.3.4",expiry-time="202001010000" '
                     "ssh-ed25519 AAAAold ascendctl-relay-old\n")
    module.cmd_deauthorize({"push": "p1", "user": "root"})
    assert path.read_text() == "ssh-ed25519 AAAAoperator operator@desk\n"
    assert capfd.readouterr().out.count('"removed":2') == 1


def test_authorize_refuses_a_command_that_could_break_out_of_its_quotes(authorized_keys):
    module, path = authorized_keys
    entry = {"public_key": "ssh-ed25519 AAAAx", "command": 'relay" ,no-restrict',
             "from": ["198.18.9.11"]}
    with pytest.raises(ValueError):
        module.cmd_authorize({"push": "p1", "user": "root", "ttl": 60, "entries": [entry]})
    assert "AAAAx" not in path.read_text()


def test_relay_key_is_made_on_the_node(tmp_path, capfd):
    from ascendctl.weights.nodehelper import helper_module

    helper_module().cmd_relay_key(str(tmp_path), "tmp/relay-keys/p/c0h0")
    key_path = tmp_path / "tmp/relay-keys/p/c0h0"
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"
    assert oct(key_path.parent.stat().st_mode & 0o777) == "0o700"
    public = (tmp_path / "tmp/relay-keys/p/c0h0.pub").read_text().split()[:2]
    assert " ".join(public) in capfd.readouterr().out
