"""Running host commands for the lab: checked, quiet unless they fail, errors as LabError."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from ascendctl.errors import AscendctlError, LabUnavailable

# What a host needs to run the lab, and the Debian package that provides each command.
REQUIRED_COMMANDS: dict[str, str] = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "ssh-keygen": "openssh-client",
    "ssh-keyscan": "openssh-client",
    "mount": "mount",
}


class LabError(AscendctlError):
    """A lab operation failed (a host command returned an error)."""


def check_host() -> None:
    """Raise LabUnavailable, naming what to install, when this machine cannot run the lab."""
    if os.geteuid() != 0:
        raise LabUnavailable("the lab needs root (systemd-nspawn, bridges, mounts): run as root")
    missing = sorted({pkg for cmd, pkg in REQUIRED_COMMANDS.items() if shutil.which(cmd) is None})
    if missing:
        raise LabUnavailable(
            "the lab needs commands this machine lacks; install them with: "
            f"apt-get install -y {' '.join(missing)}")
    if not os.path.isdir("/sys/fs/cgroup"):
        raise LabUnavailable("the lab needs /sys/fs/cgroup (cgroups) to run nodes")


def host_can_run_lab() -> tuple[bool, str]:
    """(True, "") when the lab can run here, else (False, reason)."""
    try:
        check_host()
    except LabUnavailable as err:
        return False, str(err)
    return True, ""


def run(argv: Sequence[str], *, check: bool = True, input: str | bytes | None = None,
        timeout: float | None = 120, env: dict[str, str] | None = None,
        capture: bool = True) -> subprocess.CompletedProcess:
    """Run a host command; on failure raise LabError with the command and its stderr."""
    text = not isinstance(input, bytes)
    try:
        proc = subprocess.run(list(argv), input=input, text=text, timeout=timeout, env=env,
                              stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.PIPE if capture else None)
    except subprocess.TimeoutExpired as err:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from err
    except FileNotFoundError as err:
        raise LabError(f"command not found: {argv[0]}") from err
    if check and proc.returncode != 0:
        err_text = proc.stderr if isinstance(proc.stderr, str) else (proc.stderr or b"").decode(
            errors="replace")
        raise LabError(f"command failed ({proc.returncode}): {' '.join(argv)}: "
                       f"{(err_text or '').strip()[-800:]}")
    return proc
