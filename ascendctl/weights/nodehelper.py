"""The node-side helper (runtime/ascendctl_runtime/weights_node.py), seen from the jump host.

The same file is shipped to the nodes and imported here, so the sampled fingerprint is
computed by one function on both sides.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

from ascendctl.paths import runtime_dir

HELPER_NAME = "weights_node.py"


def helper_path() -> Path:
    return runtime_dir() / HELPER_NAME


@functools.lru_cache(maxsize=1)
def helper_source() -> bytes:
    return helper_path().read_bytes()


def helper_digest() -> str:
    return hashlib.sha256(helper_source()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def helper_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ascendctl_weights_node", helper_path())
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the node helper {helper_path()}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fingerprint_file(path: str | Path, size: int | None = None) -> str:
    return helper_module().fingerprint_file(str(path), size)


def remote_helper_path(root: str) -> str:
    """Where the helper lives on a node (versioned, so old and new pushes never mix)."""
    return f"{root}/bin/ascendctl-weights-{helper_digest()}.py"
