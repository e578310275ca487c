"""Fetch released sdists from the package registry with pip, byte for byte as published.

`pip download --no-binary :all:` prepares each sdist's metadata, which runs its build
backend: with build isolation that installs the build requirements from source (torch,
cmake, torch-npu ... for hours). So the download runs `--no-build-isolation` in a small
throw-away venv (setuptools, setuptools-scm, setuptools-rust), with what the two setup.py
files need to describe themselves without a device: vllm-ascend's `SOC_VERSION` (else it
calls npu-smi), vLLM's `VLLM_TARGET_DEVICE=empty` with `VLLM_VERSION_OVERRIDE` (else the
version gets a `+empty` suffix pip rejects) and a stub `torch` module on PYTHONPATH (its
setup.py imports torch at the top). Only metadata is prepared; nothing is built or
installed, and the saved file is the registry's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

BUILD_TOOLS = ["setuptools>=77", "setuptools-scm", "setuptools-rust", "wheel", "packaging"]
TORCH_STUB = {
    "torch/__init__.py": '__version__ = "0.0.0"\n\nclass version:\n    cuda = None\n'
                         '    hip = None\n    git_version = ""\n',
    "torch/utils/__init__.py": "",
    "torch/utils/cpp_extension.py": "CUDA_HOME = None\nROCM_HOME = None\n",
}


class Downloader:
    def __init__(self, work: Path):
        self.work = work
        self.sdists = work / "sdists"
        self.sdists.mkdir(parents=True, exist_ok=True)
        self._python: Path | None = None

    def python(self) -> Path:
        if self._python is None:
            env_dir = self.work / "download-venv"
            python = env_dir / "bin" / "python"
            if not python.exists():
                venv.create(env_dir, with_pip=True)
                subprocess.run([str(python), "-m", "pip", "install", "-q", *BUILD_TOOLS],
                               check=True)
            stub = self.work / "torch-stub"
            for name, text in TORCH_STUB.items():
                (stub / name).parent.mkdir(parents=True, exist_ok=True)
                (stub / name).write_text(text)
            self._python = python
        return self._python

    def sdist(self, package: str, version: str, *, offline: bool) -> Path:
        stem = package.replace("-", "_")
        for candidate in (self.sdists / f"{stem}-{version}.tar.gz",
                          self.sdists / f"{package}-{version}.tar.gz"):
            if candidate.exists():
                return candidate
        if offline:
            raise SystemExit(f"--offline: no {package} {version} sdist in {self.sdists}")
        env = dict(os.environ, SOC_VERSION="ascend910b1", VLLM_TARGET_DEVICE="empty",
                   VLLM_VERSION_OVERRIDE=version,
                   PYTHONPATH=str(self.work / "torch-stub"))
        print(f"downloading {package}=={version}", file=sys.stderr)
        subprocess.run([str(self.python()), "-m", "pip", "download", f"{package}=={version}",
                        "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                        "-q", "-d", str(self.sdists)], check=True, env=env)
        return self.sdist(package, version, offline=True)

    def versions(self, package: str) -> list[str]:
        """Every version the registry lists, pre-releases included (`pip index versions`)."""
        result = subprocess.run([str(self.python()), "-m", "pip", "index", "versions", "--pre",
                                 package], check=True, capture_output=True, text=True)
        match = re.search(r"Available versions: (.*)", result.stdout)
        if match is None:
            raise SystemExit(f"pip index versions {package}: {result.stdout[-300:]}")
        return [v.strip() for v in match.group(1).split(",")]
