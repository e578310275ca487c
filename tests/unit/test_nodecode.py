"""Node code ships one way, its dependencies found from its imports (ascendctl/nodecode.py):
every runtime entry point imports from exactly the files shipped with it, with the
standard library only; an import of anything else is refused before anything ships."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendctl.deploy.bundle import runtime_bundle
from ascendctl.facts import system as facts_system
from ascendctl.nodecode import NodeCode, ShippingError, installed
from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin

CODE = installed()
ENTRIES = CODE.entry_points()
RUN_CALL_ENTRIES = [e for e in ENTRIES
                    if "def run_call(" in CODE.module(e).source().decode()]


def isolated(directory: Path, code: str, stdin: bytes | None = None):
    """CODE run by a Python that sees the standard library and DIRECTORY only."""
    prelude = f"import sys; sys.path.insert(0, {str(directory)!r})\n"
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code], input=stdin,
                          capture_output=True, timeout=120)


def test_the_entry_points_are_the_modules_a_node_runs():
    short = {e.rpartition(".")[2] for e in ENTRIES}
    assert {"launcher", "watchdog", "exporter", "supervisor", "probe", "release_ops",
            "status_node", "engine_node", "hold_node", "weights_node"} <= short
    assert not {"nodeutil", "contract", "layout", "healthstore", "agent"} & short


@pytest.mark.parametrize("entry", ENTRIES)
def test_each_entry_point_imports_from_exactly_what_ships_with_it(tmp_path, entry):
    for module in CODE.closure([entry]):
        target = tmp_path / module.relative_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(module.source())
    done = isolated(tmp_path, f"import {entry} as entry\nprint(entry.__file__)")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip().startswith(str(tmp_path))


@pytest.mark.parametrize("entry", RUN_CALL_ENTRIES)
def test_a_node_call_loads_its_entry_from_stdin_alone(tmp_path, entry):
    request = {"op": "no-such-op", "root": str(tmp_path), "kwargs": {}}
    done = isolated(tmp_path / "empty", BOOTSTRAP,
                    stdin=call_stdin(entry.rpartition(".")[2], request))
    # the entry's own run_call answered: it and everything it imports loaded from stdin
    answer = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert "no-such-op" in answer["error"], done.stderr.decode()
    assert b"Traceback" not in done.stderr


def test_the_release_bundle_is_every_entry_point_with_its_imports():
    paths = {f.path for f in runtime_bundle()}
    expected = {f"runtime/{m.relative_path}" for m in CODE.closure(ENTRIES)}
    assert paths == expected
    assert {"runtime/ascendctl/__init__.py", "runtime/ascendctl/facts/__init__.py",
            "runtime/ascendctl/facts/npu_smi.py", "runtime/ascendctl_runtime/contract.py",
            "runtime/ascendctl_runtime/launcher.py"} <= paths
    # facts modules no node code imports stay home
    assert "runtime/ascendctl/facts/kernel.py" not in paths


def test_the_weights_helper_needs_nothing_beside_it():
    # installed as one script in <root>/bin (ascendctl/weights/nodehelper.py)
    assert [m.name for m in CODE.closure(["ascendctl_runtime.weights_node"])] == [
        "ascendctl_runtime", "ascendctl_runtime.weights_node"]


# -- the finder's rules, on a tree of its own ------------------------------------------

def tree(tmp_path: Path, files: dict[str, str]) -> NodeCode:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("ascendctl_runtime", "ascendctl", "ascendctl/facts"):
        init = tmp_path / package / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("")
    return NodeCode([tmp_path])


@pytest.mark.parametrize("source, refused", [
    ("import yaml\n", "imports yaml, which is neither the standard library nor node code"),
    ("from ascendctl.errors import InputError\n", "imports ascendctl.errors"),
    ("from ascendctl import errors\n", "imports ascendctl.errors, which is not node code"),
    ("def later():\n    import pydantic\n", "imports pydantic"),
    ("from ascendctl_runtime import missing\nimport ascendctl_runtime.gone\n",
     "imports ascendctl_runtime.gone, which does not exist"),
])
def test_the_finder_refuses_an_import_that_would_not_be_there(tmp_path, source, refused):
    code = tree(tmp_path, {"ascendctl/errors.py": "", "ascendctl_runtime/entry.py":
                           "import json\n" + source + "def main():\n    pass\n"})
    with pytest.raises(ShippingError) as caught:
        code.closure(["ascendctl_runtime.entry"])
    assert refused in str(caught.value)
    assert str(caught.value).startswith("ascendctl_runtime/entry.py:")


def test_the_finder_follows_every_kind_of_import_and_skips_type_checking(tmp_path):
    code = tree(tmp_path, {
        "ascendctl_runtime/entry.py": (
            "from typing import TYPE_CHECKING\n"
            "from . import helper\n"
            "from .sub import inner\n"
            "if TYPE_CHECKING:\n    import yaml\nelse:\n    import ascendctl_runtime.other\n"
            "def run_call(payload):\n    from ascendctl.facts.parser import parse\n"),
        "ascendctl_runtime/helper.py": "import ascendctl_runtime.entry\n",      # a cycle
        "ascendctl_runtime/other.py": "",
        "ascendctl_runtime/sub/__init__.py": "",
        "ascendctl_runtime/sub/inner.py": "from .. import helper\n",
        "ascendctl/facts/parser.py": "import re\ndef parse(text):\n    return text\n",
        "ascendctl/facts/unused.py": "",
    })
    shipped = [m.relative_path for m in code.closure(["ascendctl_runtime.entry"])]
    assert shipped == [
        "ascendctl/__init__.py", "ascendctl/facts/__init__.py", "ascendctl/facts/parser.py",
        "ascendctl_runtime/__init__.py", "ascendctl_runtime/entry.py",
        "ascendctl_runtime/helper.py", "ascendctl_runtime/other.py",
        "ascendctl_runtime/sub/__init__.py", "ascendctl_runtime/sub/inner.py"]
    assert code.entry_points() == ("ascendctl_runtime.entry",)


def test_the_gather_scripts_python_needs_no_node_code(tmp_path):
    # the gather script ships no module, only these inline programs: standard library only
    snippets = {f"ascendctl_runtime/snippet{i}.py": text for i, text in
                enumerate((facts_system._PY_PACKAGES, facts_system._PY_PROBE))}
    code = tree(tmp_path, snippets)
    for rel in snippets:
        name = rel.removesuffix(".py").replace("/", ".")
        assert [m.name for m in code.closure([name])] == ["ascendctl_runtime", name]


def test_a_long_import_chain_is_followed_in_linear_time(tmp_path):
    # 3000 modules importing the next, the last the first: far more than any node needs
    count = 3000
    files = {f"ascendctl_runtime/m{i}.py": f"import os\nfrom ascendctl_runtime import "
             f"m{(i + 1) % count}\n" for i in range(count)}
    code = tree(tmp_path, files)
    started = time.perf_counter()
    shipped = code.closure(["ascendctl_runtime.m0"])
    assert time.perf_counter() - started < 10.0
    assert len(shipped) == count + 1


def test_hosts_asking_at_once_all_find_their_entry(monkeypatch):
    """Status and deploy look node code up from one thread per host, on one shared finder:
    a host that asks while another is still looking must not be told "not node code"
    (CI saw exactly that for rank 1). The file checks are slowed so the threads overlap."""
    import threading

    real_is_file = Path.is_file

    def slow_is_file(self):
        time.sleep(0.01)
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", slow_is_file)
    shared = NodeCode(CODE.search_path)
    start = threading.Barrier(6)
    failures: list[Exception] = []

    def ask():
        start.wait()
        try:
            shared.closure(["ascendctl_runtime.status_node"])
        except Exception as exc:     # any failure, not only ShippingError (a SystemError
            failures.append(exc)     # of ast.parse in a thread would pass unseen)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
