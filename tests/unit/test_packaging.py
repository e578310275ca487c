"""The wheel carries everything the tool reads at run time (templates, playbooks, the node
runtime, data files), and the CLI finds them through the installed packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ascendctl import paths

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel of what a clean checkout holds (the tracked and new files, copied: a
    build in the working tree would reuse its build/ directory, stale files included)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(source)],
                   check=True, capture_output=True, timeout=300)
    (built,) = out.glob("ascendctl-*.whl")
    return zipfile.ZipFile(built)


def repo_files(top: str, pattern: str) -> set[str]:
    return {str(p.relative_to(ROOT / top)) for p in (ROOT / top).rglob(pattern)
            if "__pycache__" not in p.parts}


@pytest.mark.parametrize("top, package, pattern", [
    ("templates", "ascendctl/templates", "*.j2"),
    ("templates", "ascendctl/templates", "*.json"),
    ("playbooks", "ascendctl/playbooks", "*.yaml"),
    ("runtime/ascendctl_runtime", "ascendctl_runtime", "*.py"),
])
def test_wheel_holds_every_data_file(wheel, top, package, pattern):
    names = set(wheel.namelist())
    wanted = repo_files(top, pattern)
    assert wanted, f"nothing matches {top}/{pattern}"
    missing = sorted(f for f in wanted if f"{package}/{f}" not in names)
    assert not missing, f"the wheel lacks {missing}"


def test_wheel_holds_package_data(wheel):
    names = set(wheel.namelist())
    for data in ("ascendctl/doctor/data/signatures.yaml",
                 "ascendctl/preflight/schema/preflight.schema.json",
                 "ascendctl/releases/data/release_sets.yaml",
                 "ascendctl/inventory/data/agreement_prompts.yaml"):
        assert data in names


@pytest.mark.parametrize("top", ["ascendctl", "ascendctl_lab"])
def test_wheel_holds_every_python_package(wheel, top):
    names = set(wheel.namelist())
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / top).rglob("__init__.py")}
    assert packages
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in names)
    assert not missing, f"the wheel lacks the packages {missing}"


def test_the_lab_ships_in_the_wheel_with_its_dependencies_behind_the_extra(wheel):
    """An extra adds dependencies, not files: the lab's modules are in the one wheel (the
    simulators too, copied into the nodes), its third-party dependencies only under `lab`."""
    names = set(wheel.namelist())
    assert {"ascendctl_lab/lab.py", "ascendctl_lab/sim/npu_smi.py"} <= names
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    lab_only = {r.split(";")[0].split(">")[0].strip() for r in requires if "extra == \"lab\"" in r}
    unconditional = {r.split(";")[0].split(">")[0].strip() for r in requires if ";" not in r}
    assert lab_only == {"tokenizers", "safetensors", "numpy"}
    assert not lab_only & unconditional


def test_resources_resolve_to_the_package_directories():
    assert (paths.templates_dir() / "systemd" / "ascendctl-engine.service.j2").is_file()
    for book in ("deploy.yaml", "rollback.yaml", "switch.yaml"):    # switch: both import it
        assert (paths.playbooks_dir() / book).is_file()
    assert (paths.runtime_dir() / "launcher.py").is_file()
