"""Files on the jump host that the inventory names (issue 19): ssh.known_hosts, the SSH key
and serving.api_key's file. A FIFO, a device, a directory or a giant in their place is
refused with exit 2 and one line naming the inventory line, the field and the file, before
any host is contacted and without showing a secret; /dev/null stays a valid known_hosts
(nothing known, as with OpenSSH)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import paramiko
import pytest

from ascendctl.errors import InputError
from ascendctl.inventory.known_hosts import MAX_KNOWN_HOSTS_BYTES
from ascendctl.transport.hostkeys import append_known_host, configure_client, load_known_hosts
from tests.unit.hostile_files import (
    GOOD, Cost, cli, fifo, good_inventory, hang_guard, measure_startup, refused, sparse,
)

KEY = "sk-ci-0123456789abcdef"


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    return measure_startup(tmp_path_factory.mktemp("startup"))


def line_of(path: Path, needle: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


# -- ssh.known_hosts -----------------------------------------------------------------

KNOWN_HOSTS = {
    "a FIFO": (lambda tmp: fifo(tmp / "known_hosts"), "a FIFO, not a regular file"),
    "a device": (lambda tmp: Path("/dev/zero"), "a device, not a regular file"),
    "a directory": (lambda tmp: tmp, "a directory, not a regular file"),
    "too large": (lambda tmp: sparse(tmp / "known_hosts", MAX_KNOWN_HOSTS_BYTES + 1),
                  "too large for a known_hosts file"),
}


@pytest.mark.parametrize("case", KNOWN_HOSTS, ids=list(KNOWN_HOSTS))
def test_a_hostile_known_hosts_is_refused_by_inventory_check(tmp_path, startup, case):
    make, phrase = KNOWN_HOSTS[case]
    path = make(tmp_path)

    def edit(_data, variables):
        variables["ssh"]["known_hosts"] = str(path)

    inv = good_inventory(tmp_path, edit)
    line = refused(cli(tmp_path, "inventory", "check", "-i", inv), startup,
                   prefix=f"error: {inv}:{line_of(inv, 'known_hosts')}: "
                          "all.vars.ssh.known_hosts: ", phrase=phrase)
    assert f"known_hosts file '{path}'" in line


def test_a_fifo_from_the_environment_is_named_as_such(tmp_path, startup):
    path = fifo(tmp_path / "known_hosts")
    line = refused(cli(tmp_path, "play", "playbooks/examples/demo.yaml", "-i", GOOD,
                       "--list-tasks", env={"ASCENDCTL_KNOWN_HOSTS": str(path)}), startup,
                   prefix=f"error: {GOOD}:", phrase="a FIFO, not a regular file")
    assert "(from ASCENDCTL_KNOWN_HOSTS)" in line


@pytest.mark.parametrize("value", ["/dev/null", "missing/known_hosts"])
def test_dev_null_and_a_file_not_yet_written_are_valid(tmp_path, value):
    def edit(_data, variables):
        variables["ssh"]["known_hosts"] = value

    done, _ = cli(tmp_path, "inventory", "check", "-i", good_inventory(tmp_path, edit))
    assert done.returncode == 0, done.stderr


def host_key(tmp_path: Path) -> paramiko.PKey:
    path = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)
    return paramiko.Ed25519Key(filename=str(path))


def test_connecting_with_a_fifo_known_hosts_fails_fast_and_records_nothing(tmp_path):
    """The same file read when a host is connected to (the inventory may be old news)."""
    path = fifo(tmp_path / "known_hosts")
    with hang_guard():
        with pytest.raises(InputError, match="a FIFO, not a regular file"):
            load_known_hosts(path)
        with pytest.raises(InputError, match="a FIFO"):
            configure_client(paramiko.SSHClient(), "node0", str(path), "accept-new")
        with pytest.raises(InputError, match="a FIFO"):
            append_known_host(path, "198.18.0.11", host_key(tmp_path))
    assert os.path.exists(path) and not path.is_file()


def test_recording_into_a_device_is_refused(tmp_path):
    with pytest.raises(InputError, match="a device"):
        append_known_host(Path("/dev/zero"), "198.18.0.11", host_key(tmp_path))


# -- the SSH key file -----------------------------------------------------------------

def test_a_fifo_ssh_key_is_named_as_a_fifo(tmp_path, startup):
    path = fifo(tmp_path / "id_ed25519")

    def edit(_data, variables):
        variables["ssh"]["private_key"] = str(path)

    inv = good_inventory(tmp_path, edit)
    refused(cli(tmp_path, "inventory", "check", "-i", inv), startup,
            prefix=f"error: {inv}:{line_of(inv, 'private_key')}: all.vars.ssh.private_key: ",
            phrase=f"SSH key file {path} is a FIFO, not a regular file")


# -- serving.api_key: {file: ...} -----------------------------------------------------

def key_file(tmp_path: Path, content: bytes = KEY.encode(), mode: int = 0o600) -> Path:
    path = tmp_path / "api.key"
    path.write_bytes(content)
    path.chmod(mode)
    return path


KEY_FILES = {
    "a FIFO": (lambda tmp: fifo(tmp / "api.key"), "a FIFO, not a regular file"),
    "a device": (lambda tmp: Path("/dev/zero"), "a device, not a regular file"),
    "a directory": (lambda tmp: tmp, "a directory, not a regular file"),
    "too large": (lambda tmp: key_file(tmp, KEY.encode() * 10_000),
                  "too large for a key file (limit 65536)"),
    "readable by others": (lambda tmp: key_file(tmp, mode=0o644),
                           "is readable by others; chmod 600 it"),
    "two lines": (lambda tmp: key_file(tmp, (KEY + "\n" + KEY).encode()),
                  "holds more than one line"),
}


@pytest.mark.parametrize("case,process", [(case, False) for case in KEY_FILES]
                         + [("readable by others", True)])   # True: `python -m ascendctl`
def test_a_hostile_key_file_is_refused_by_render(tmp_path, startup, case, process):
    make, phrase = KEY_FILES[case]
    path = make(tmp_path)

    def edit(_data, variables):
        variables["serving"]["api_key"] = {"file": str(path)}

    inv = good_inventory(tmp_path, edit)
    out = tmp_path / "rendered"
    run = cli(tmp_path, "render", "-i", inv, "--out", out, "--show-secrets",
              process=process)
    line = refused(run, None if process else startup,
                   prefix=f"error: {inv}:{line_of(inv, 'api_key')}: serving.api_key: ",
                   phrase=phrase)
    assert str(path) in line and KEY not in line
    assert not out.exists()                                   # nothing written


def test_a_valid_key_file_is_rendered(tmp_path):
    path = key_file(tmp_path, (KEY + "\n").encode())

    def edit(_data, variables):
        variables["serving"]["api_key"] = {"file": str(path)}

    out = tmp_path / "rendered"
    done, _ = cli(tmp_path, "render", "-i", good_inventory(tmp_path, edit), "--out", out,
                  "--show-secrets")
    assert done.returncode == 0, done.stderr
    assert any(KEY in p.read_text() for p in out.rglob("secrets.env"))
