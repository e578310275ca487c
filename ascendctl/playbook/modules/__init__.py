"""Playbook modules: the built-in ones and every package's `playbook_modules`."""

from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path

from ascendctl.playbook.modules.base import (
    MODULES, FileDiff, Module, ModuleContext, ModuleError, ModuleResult, command_data,
    get_module, register_module,
)

__all__ = [
    "MODULES", "FileDiff", "Module", "ModuleContext", "ModuleError", "ModuleResult",
    "command_data", "get_module", "load_modules", "register_module",
]

BUILTIN = ("command", "files", "systemd", "wait_for", "logic")
PLUGIN_ENV = "ASCENDCTL_PLAYBOOK_MODULES"   # extra importable module names, comma-separated
_builtin_loaded = False
_plugins_loaded = False
_lock = threading.Lock()


def load_modules(*, plugins: bool = True) -> dict[str, type[Module]]:
    """Import the built-in modules and (with plugins) every
    `ascendctl/<pkg>/playbook_modules[.py]`.

    Other packages register their modules with @register_module in their own files;
    nothing here lists them. A playbook that uses only built-in modules does not pay for
    importing the others.
    """
    global _builtin_loaded, _plugins_loaded
    with _lock:
        if not _builtin_loaded:
            for name in BUILTIN:
                importlib.import_module(f"ascendctl.playbook.modules.{name}")
            _builtin_loaded = True
        if not plugins or _plugins_loaded:
            return MODULES
        package_root = Path(__file__).resolve().parents[2]
        for child in sorted(package_root.iterdir()):
            if child.name.startswith(("_", ".")) or not child.is_dir():
                continue
            if (child / "playbook_modules.py").is_file() or \
                    (child / "playbook_modules" / "__init__.py").is_file():
                importlib.import_module(f"ascendctl.{child.name}.playbook_modules")
        for extra in filter(None, (p.strip() for p in os.environ.get(PLUGIN_ENV, "").split(","))):
            importlib.import_module(extra)
        _plugins_loaded = True
        return MODULES
