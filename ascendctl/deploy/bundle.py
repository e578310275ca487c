"""The node-side runtime each release carries: ascendctl_runtime plus the pure facts parsers.

Both are standard-library Python, so they run on whatever Python the node has; the
exporter and the watchdog read npu-smi with the same parsers as preflight.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache, cache
from pathlib import Path
from types import ModuleType

from ascendctl.paths import PACKAGE_DIR, runtime_dir
from ascendctl.render.files import RenderedFile

RUNTIME_PREFIX = "runtime"


def _python_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.py") if p.is_file())


@lru_cache(maxsize=1)
def runtime_bundle() -> tuple[RenderedFile, ...]:
    """Files under `<release>/runtime/` (PYTHONPATH of the units)."""
    files = [RenderedFile(f"{RUNTIME_PREFIX}/ascendctl_runtime/{p.name}", p.read_bytes())
             for p in _python_files(runtime_dir())]
    files.append(RenderedFile(f"{RUNTIME_PREFIX}/ascendctl/__init__.py",
                              (PACKAGE_DIR / "__init__.py").read_bytes()))
    files += [RenderedFile(f"{RUNTIME_PREFIX}/ascendctl/facts/{p.name}", p.read_bytes())
              for p in _python_files(PACKAGE_DIR / "facts")]
    return tuple(files)


@cache
def runtime_module(name: str) -> ModuleType:
    """Load a runtime module from runtime/ (it is shipped to nodes, not installed here)."""
    path = runtime_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"ascendctl_runtime.{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
