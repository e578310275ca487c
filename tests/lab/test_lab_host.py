"""A machine that cannot run the lab gets one clear line saying what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ascendctl.errors import LabUnavailable
from ascendctl.lab import hostcmd


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabUnavailable, match="needs root"):
        hostcmd.check_host()


def test_missing_commands_name_the_packages(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda cmd: None if cmd in ("systemd-nspawn", "debootstrap")
                        else real_which(cmd))
    with pytest.raises(LabUnavailable) as err:
        hostcmd.check_host()
    assert "apt-get install -y debootstrap systemd-container" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to drop to another user")
def test_cli_as_non_root_exits_2_without_traceback():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "ascendctl", "lab", "up", "--name", "nonroot"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": "/tmp"})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: the lab needs root")
