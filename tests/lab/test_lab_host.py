"""A machine that cannot run the lab gets one clear line saying what to do."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from ascendctl.errors import LabUnavailable
from ascendctl_lab import hostcmd

ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


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


def test_cli_as_non_root_exits_2_with_one_line(monkeypatch, capsys):
    from ascendctl import cli

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["ascendctl", "lab", "up", "--name", "nonroot"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the lab needs root") and err.count("\n") == 1
