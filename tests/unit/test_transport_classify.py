"""Every connect failure becomes one clear, classified line."""

from __future__ import annotations

import errno

import paramiko
import pytest
from paramiko.ssh_exception import NoValidConnectionsError

from ascendctl.transport import ConnectKind
from ascendctl.transport.classify import classify_connect_error
from ascendctl.transport.hostkeys import AcceptNewPolicy, StrictPolicy, fingerprint


def classify(exc, **kw):
    args = dict(host="node1", address="198.18.0.12", port=22, user="root", timeout=3.0,
                key="/k/id", known_hosts="/k/known_hosts")
    args.update(kw)
    return classify_connect_error(exc, **args)


def test_changed_host_key_names_both_fingerprints_and_the_fix():
    got, expected = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    err = classify(paramiko.BadHostKeyException("198.18.0.12", got, expected))
    assert err.kind == ConnectKind.HOST_KEY_CHANGED
    assert fingerprint(got) in err.reason and fingerprint(expected) in err.reason
    assert "ssh-keygen -R '198.18.0.12' -f /k/known_hosts" in err.reason
    assert not err.retryable


def test_auth_failure_names_user_address_and_key():
    err = classify(paramiko.AuthenticationException("Authentication failed."))
    assert err.kind == ConnectKind.AUTH
    assert "root@198.18.0.12:22" in err.reason and "/k/id" in err.reason
    assert not err.retryable


@pytest.mark.parametrize("code,kind,text", [
    (errno.ECONNREFUSED, ConnectKind.REFUSED, "connection refused"),
    (errno.EHOSTUNREACH, ConnectKind.NO_ROUTE, "no route to host"),
])
def test_socket_level_failures(code, kind, text):
    exc = NoValidConnectionsError({("198.18.0.12", 22): OSError(code, "x")})
    err = classify(exc)
    assert err.kind == kind and text in err.reason and err.retryable


def test_timeouts():
    assert classify(TimeoutError("timed out")).kind == ConnectKind.TIMEOUT
    banner = paramiko.SSHException("Error reading SSH protocol banner")
    assert classify(banner, elapsed=3.0).kind == ConnectKind.TIMEOUT
    assert classify(banner, elapsed=0.1).kind == ConnectKind.PROTOCOL
    assert classify(paramiko.SSHException("No existing session")).kind == ConnectKind.TIMEOUT


def test_strict_policy_refuses_unknown_keys_with_the_fingerprint(tmp_path):
    key = paramiko.ECDSAKey.generate()
    policy = StrictPolicy("node1", tmp_path / "known_hosts")
    with pytest.raises(Exception) as info:
        policy.missing_host_key(paramiko.SSHClient(), "[198.18.0.12]:2222", key)
    err = info.value
    assert err.kind == ConnectKind.UNKNOWN_HOST_KEY
    assert fingerprint(key) in err.reason and "accept-new" in err.reason


def test_accept_new_records_the_key_once(tmp_path):
    path = tmp_path / "sub" / "known_hosts"
    key = paramiko.ECDSAKey.generate()
    client = paramiko.SSHClient()
    policy = AcceptNewPolicy("node1", path)
    policy.missing_host_key(client, "[198.18.0.12]:2222", key)
    policy.missing_host_key(client, "[198.18.0.12]:2222", key)
    lines = path.read_text().splitlines()
    assert lines == [f"[198.18.0.12]:2222 {key.get_name()} {key.get_base64()}"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = paramiko.HostKeys(str(path))
    assert loaded.lookup("[198.18.0.12]:2222")[key.get_name()] == key
