"""The node code a node needs, found from its imports (as Ansible's module dependency
finder does): parse the entry module with `ast`, follow every import into the shipped
packages, recursively, and refuse an import of anything that is neither the standard
library nor shipped.

The shipped packages are the node runtime (`ascendctl_runtime`) and the pure facts parsers
(`ascendctl.facts`, with the `ascendctl` package file above them). Both ways node code
travels use this: a release's runtime bundle (ascendctl/deploy/bundle.py, every entry
point and what it imports) and a one-shot node call (ascendctl/transport/nodecall.py, one
entry and what it imports). Imports under `if TYPE_CHECKING:` are not followed.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ascendctl.errors import AscendctlError
from ascendctl.paths import PACKAGE_DIR, runtime_dir

SHIPPED_PACKAGES = ("ascendctl_runtime", "ascendctl.facts")
RUNTIME_PACKAGE = "ascendctl_runtime"
ENTRY_FUNCTIONS = ("main", "run_call")


class ShippingError(AscendctlError):
    """Node code that cannot run on a node as shipped (it imports what does not travel)."""


@dataclass(frozen=True)
class NodeModule:
    name: str                  # dotted: ascendctl.facts.npu_smi
    path: Path                 # its source file on this machine
    is_package: bool

    @property
    def relative_path(self) -> str:
        """Where it goes under a directory on sys.path: ascendctl/facts/npu_smi.py."""
        path = self.name.replace(".", "/")
        return f"{path}/__init__.py" if self.is_package else f"{path}.py"

    def source(self) -> bytes:
        return self.path.read_bytes()


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[tuple[int, str, int, tuple[str, ...] | None]]:
    """(line, module, level, imported names or None) of every import statement, at any
    depth (a function's lazy import too), except under `if TYPE_CHECKING:`. Only
    statements are walked: an import is never inside an expression."""
    found: list[tuple[int, str, int, tuple[str, ...] | None]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or "", node.level,
                          tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.If) and _type_checking(node.test):
            pending += node.orelse
        else:
            for name in ("body", "orelse", "finalbody"):
                pending += getattr(node, name, None) or []
            for handler in getattr(node, "handlers", None) or []:
                pending += handler.body
            for case in getattr(node, "cases", None) or []:
                pending += case.body
    return sorted(found)


class NodeCode:
    """The shipped packages as found under SEARCH_PATH (directories, like sys.path)."""

    def __init__(self, search_path: Sequence[Path], packages: Sequence[str] = SHIPPED_PACKAGES):
        self.search_path = tuple(Path(p) for p in search_path)
        self.packages = tuple(packages)
        self._modules: dict[str, NodeModule | None] = {}
        self._trees: dict[Path, ast.Module] = {}
        self._parsing = threading.Lock()

    def shipped(self, name: str) -> bool:
        return any(_within(name, package) for package in self.packages)

    def _above_shipped(self, name: str) -> bool:
        return any(package.startswith(name + ".") for package in self.packages)

    def find(self, name: str) -> NodeModule | None:
        """The module NAME in the shipped packages (or a package above them), if any."""
        if not (self.shipped(name) or self._above_shipped(name)):
            return None
        return self._locate(name)

    def _locate(self, name: str) -> NodeModule | None:
        # Status and deploy ask from one thread per host: the answer is stored only once
        # it is known (a placeholder seen by another thread would read as "not found").
        if name not in self._modules:
            found = None
            parts = name.split(".")
            for directory in self.search_path:
                package = directory.joinpath(*parts, "__init__.py")
                module = directory.joinpath(*parts[:-1], parts[-1] + ".py")
                if package.is_file() or module.is_file():
                    found = NodeModule(name, package if package.is_file() else module,
                                       package.is_file())
                    break
            self._modules[name] = found
        return self._modules[name]

    def module(self, name: str) -> NodeModule:
        found = self.find(name)
        if found is None:
            raise ShippingError(f"{name} is not node code (none of {', '.join(self.packages)} "
                                f"under {', '.join(map(str, self.search_path))})")
        return found

    def _tree(self, path: Path) -> ast.Module:
        # One parse at a time: CPython 3.11's ast.parse keeps its recursion depth in state
        # shared by threads, and two parses at once fail with "AST constructor recursion
        # depth mismatch" (python/cpython#106905).
        with self._parsing:
            if path not in self._trees:
                self._trees[path] = ast.parse(path.read_bytes(), filename=str(path))
            return self._trees[path]

    def imports_of(self, module: NodeModule) -> list[str]:
        """The node modules MODULE imports (ShippingError for any import that would not
        be there on a node)."""
        needed: list[str] = []
        for line, target, level, names in _imports(self._tree(module.path)):
            where = f"{module.relative_path}:{line}"
            if level:
                base = module.name if module.is_package else module.name.rpartition(".")[0]
                for _ in range(level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{target}" if target else base
            if target == "__future__":
                continue
            needed += self._resolve(where, target, names)
        return needed

    def _resolve(self, where: str, target: str, names: tuple[str, ...] | None) -> list[str]:
        """The node modules `import TARGET` / `from TARGET import NAMES` needs."""
        if not (self.shipped(target) or self._above_shipped(target)):
            if target.split(".")[0] in sys.stdlib_module_names:
                return []
            raise ShippingError(f"{where}: imports {target}, which is neither the standard "
                                f"library nor node code ({', '.join(self.packages)})")
        if self.find(target) is None:
            raise ShippingError(f"{where}: imports {target}, which does not exist")
        needed = [target]
        for name in names or ():
            sub = f"{target}.{name}"
            if name == "*" or self._locate(sub) is None:
                continue            # an attribute, not a module
            if self.find(sub) is None:
                # `from ascendctl import errors`: a module beside the shipped packages
                raise ShippingError(f"{where}: imports {sub}, which is not node code "
                                    f"({', '.join(self.packages)})")
            needed.append(sub)
        return needed

    def closure(self, entries: Iterable[str]) -> tuple[NodeModule, ...]:
        """ENTRIES and every node module they import, recursively, with the packages
        above each (sorted by name: a node imports them itself, in its own order)."""
        seen: dict[str, NodeModule] = {}
        pending = list(entries)
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            module = self.module(name)
            seen[name] = module
            pending += _parents(name)
            pending += self.imports_of(module)
        return tuple(seen[name] for name in sorted(seen))

    def entry_points(self, package: str = RUNTIME_PACKAGE) -> tuple[str, ...]:
        """The modules of PACKAGE a node runs: each defines `main` or `run_call`."""
        base = self.module(package)
        found = []
        for path in sorted(base.path.parent.glob("*.py")):
            if path.name == "__init__.py":
                continue
            if any(isinstance(node, ast.FunctionDef) and node.name in ENTRY_FUNCTIONS
                   for node in self._tree(path).body):
                found.append(f"{package}.{path.stem}")
        return tuple(found)


@cache
def installed() -> NodeCode:
    """The node code of this installation (a checkout or a wheel)."""
    return NodeCode([runtime_dir().parent, PACKAGE_DIR.parent])
