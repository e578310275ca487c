"""The node-side runtime each release carries under `<release>/runtime/`: every entry point
of ascendctl_runtime (the units' launcher, watchdog, exporter, supervisor, the probe, ...)
and the node code they import, found from their imports (ascendctl/nodecode.py), facts
parsers included.

All of it is standard-library Python, so it runs on whatever Python the node has; the
exporter and the watchdog read npu-smi with the same parsers as preflight.
"""

from __future__ import annotations

import importlib.util
from functools import cache, lru_cache
from types import ModuleType

from ascendctl.nodecode import installed
from ascendctl.paths import runtime_dir
from ascendctl.render.files import RenderedFile
from ascendctl_runtime.layout import RUNTIME_DIR


@lru_cache(maxsize=1)
def runtime_bundle() -> tuple[RenderedFile, ...]:
    """Files under `<release>/runtime/` (PYTHONPATH of the units)."""
    code = installed()
    return tuple(RenderedFile(f"{RUNTIME_DIR}/{module.relative_path}", module.source())
                 for module in code.closure(code.entry_points()))


@cache
def runtime_module(name: str) -> ModuleType:
    """Load a runtime module from runtime/ (it is shipped to nodes, not installed here)."""
    path = runtime_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"ascendctl_runtime.{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
