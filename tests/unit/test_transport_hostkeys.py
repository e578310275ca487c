"""known_hosts handling (issue 13): appends never corrupt a file without a final newline;
@cert-authority / @revoked lines never make loading fail; revoked keys are refused (even
when also listed as trusted, and never recorded by accept-new); hashed names keep working."""

from __future__ import annotations

import subprocess

import paramiko
import pytest

from ascendctl.transport.errors import ConnectKind
from ascendctl.transport.hostkeys import (
    AcceptNewPolicy, RevokedHostKey, append_known_host, configure_client, load_known_hosts,
)


def keypair(tmp_path, name: str) -> tuple[paramiko.PKey, str]:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    public = (tmp_path / f"{name}.pub").read_text().split()
    return paramiko.Ed25519Key(filename=str(path)), f"{public[0]} {public[1]}"


def test_append_to_a_file_without_final_newline_keeps_both_entries(tmp_path):
    _, first = keypair(tmp_path, "a")
    key_b, _ = keypair(tmp_path, "b")
    path = tmp_path / "known_hosts"
    path.write_text(f"198.18.0.11 {first}")                   # no final newline
    append_known_host(path, "198.18.0.12", key_b)
    lines = path.read_text().splitlines()
    assert lines == [f"198.18.0.11 {first}",
                     f"198.18.0.12 {key_b.get_name()} {key_b.get_base64()}"]
    # OpenSSH reads both
    for host in ("198.18.0.11", "198.18.0.12"):
        found = subprocess.run(["ssh-keygen", "-F", host, "-f", str(path)],
                               capture_output=True, text=True)
        assert found.returncode == 0, host


@pytest.fixture
def mixed_known_hosts(tmp_path):
    good, good_line = keypair(tmp_path, "good")
    bad, bad_line = keypair(tmp_path, "bad")
    _, ca_line = keypair(tmp_path, "ca")
    hashed, hashed_line = keypair(tmp_path, "hashed")
    one = tmp_path / "hashed_known_hosts"
    one.write_text(f"198.18.0.13 {hashed_line}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(one)], check=True, capture_output=True)
    hashed_entry = one.read_text()
    assert hashed_entry.startswith("|1|")                      # a hashed name
    path = tmp_path / "known_hosts"
    path.write_text(f"# comment\n@cert-authority *.example {ca_line}\n"
                    f"198.18.0.11 {good_line}\n"
                    f"198.18.0.12 {bad_line}\n@revoked * {bad_line}\n"
                    f"{hashed_entry}"
                    "garbage line that is no entry\n")
    return path, good, bad, hashed


def test_markers_and_garbage_do_not_break_loading(mixed_known_hosts):
    path, good, bad, hashed = mixed_known_hosts
    known = load_known_hosts(path)
    assert known.cert_authorities == 1 and known.skipped == 1
    assert known.is_revoked("198.18.0.12", bad) and not known.is_revoked("198.18.0.11", good)
    client = paramiko.SSHClient()
    configure_client(client, "node", str(path), "strict")         # no InvalidHostKey
    keys = client.get_host_keys()
    assert keys.lookup("198.18.0.11")[good.get_name()] == good
    assert keys.lookup("198.18.0.13")[hashed.get_name()] == hashed  # hashed name matches
    assert keys.lookup("198.18.0.12") is None                       # revoked wins


def test_revoked_key_is_refused_and_never_recorded(mixed_known_hosts):
    path, _, bad, _ = mixed_known_hosts
    client = paramiko.SSHClient()
    for checking in ("strict", "accept-new"):
        policy = configure_client(client, "node", str(path), checking)
        before = path.read_text()
        with pytest.raises(RevokedHostKey) as info:
            policy.missing_host_key(client, "198.18.0.12", bad)
        assert info.value.kind == ConnectKind.HOST_KEY_CHANGED and "@revoked" in str(info.value)
        assert path.read_text() == before
    assert isinstance(policy, AcceptNewPolicy)


def test_host_known_only_through_a_ca_is_explained(mixed_known_hosts, tmp_path):
    path, *_ = mixed_known_hosts
    other, _ = keypair(tmp_path, "other")
    client = paramiko.SSHClient()
    policy = configure_client(client, "node", str(path), "strict")
    with pytest.raises(Exception) as info:
        policy.missing_host_key(client, "node9.example", other)
    assert info.value.kind == ConnectKind.UNKNOWN_HOST_KEY
    assert "@cert-authority" in info.value.reason and "certificates" in info.value.reason


def test_wildcard_entry_is_trusted_and_negation_wins(tmp_path):
    key, line = keypair(tmp_path, "lab")
    path = tmp_path / "known_hosts"
    path.write_text(f"198.18.0.*,!198.18.0.66 {line}\n")
    client = paramiko.SSHClient()
    policy = configure_client(client, "node", str(path), "strict")
    policy.missing_host_key(client, "198.18.0.11", key)              # accepted: no raise
    with pytest.raises(Exception) as info:
        policy.missing_host_key(client, "198.18.0.66", key)
    assert info.value.kind == ConnectKind.UNKNOWN_HOST_KEY
