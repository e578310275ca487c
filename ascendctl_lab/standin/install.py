"""Put the stand-in engine on a lab node: `serve.py` as `vllm` in a small venv of the
node's system Python, whose package metadata says vllm at the lab's pinned version (what
the preflight's Python-stack and version-pin checks read of a host engine)."""

from __future__ import annotations

from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING

from ascendctl_lab.standin.serve import VERSION

if TYPE_CHECKING:
    from ascendctl_lab.lab import Lab

STANDIN_DIR = "/opt/ascendctl-standin"
ENGINE_PATH = f"{STANDIN_DIR}/bin/vllm"
PROGRAM = Path(__file__).with_name("serve.py")
METADATA = ("Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
            "Summary: ascendctl lab stand-in for vllm serve (not vLLM: no model is loaded)\n")


def install_script(directory: str = STANDIN_DIR, version: str = VERSION) -> str:
    """A shell script that installs the program read from stdin into DIRECTORY (replacing
    an older copy whole, so a re-run of `lab up` is idempotent)."""
    new = quote(directory + ".new")
    metadata = quote(METADATA.format(version=version))
    return "\n".join([
        "set -eu",
        f"rm -rf {new}",
        f"mkdir -p {new}/bin",
        f"cat > {new}/bin/vllm",
        f"chmod 0755 {new}/bin/vllm",
        f"ln -s /usr/bin/python3 {new}/bin/python",
        f"ln -s python {new}/bin/python3",
        "short=$(/usr/bin/python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])')",
        "full=$(/usr/bin/python3 -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])')",
        f"info={new}/lib/python$short/site-packages/vllm-{version}.dist-info",
        'mkdir -p "$info"',
        f'printf %s {metadata} > "$info/METADATA"',
        f"printf 'home = /usr/bin\\ninclude-system-site-packages = false\\nversion = %s\\n' "
        f'"$full" > {new}/pyvenv.cfg',
        f"rm -rf {quote(directory)}",
        f"mv {new} {quote(directory)}",
    ])


def install(lab: Lab, node: str) -> None:
    """Install the stand-in on NODE, as ENGINE_PATH (the inventory's serving.engine)."""
    lab.exec(node, ["sh", "-c", install_script()], input=PROGRAM.read_text())
