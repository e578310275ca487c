"""Shared fixtures: the simulated cluster for tests marked `lab`.

The only allowed skip is "this machine cannot run the lab" (not root, no
systemd-nspawn, ...); with ASCENDCTL_REQUIRE_LAB=1 (set by .ci/run) that is a failure.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import uuid
from pathlib import Path

import pytest

# The inventory loader validates `engine:` through the engine kinds' router, which builds
# on the inventory package and hands itself to the loader when imported (the CLI does it
# before every command); tests load inventories directly.
import ascendctl.load  # noqa: F401  (registers the engine kinds with the inventory loader)

# A shell starts background jobs (`.ci/run &`, nohup) with SIGINT ignored, and Python then
# never installs its Ctrl-C handler: the tests of what Ctrl-C does would test nothing. Give
# this process (and, through exec, the commands it starts) Ctrl-C back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def require_lab() -> None:
    """Skip (or fail under ASCENDCTL_REQUIRE_LAB=1) when this machine cannot run the lab."""
    from ascendctl_lab.hostcmd import host_can_run_lab

    ok, reason = host_can_run_lab()
    if ok:
        return
    if os.environ.get("ASCENDCTL_REQUIRE_LAB") == "1":
        pytest.fail(f"ASCENDCTL_REQUIRE_LAB=1 but this machine cannot run the lab: {reason}",
                    pytrace=False)
    pytest.skip(f"this machine cannot run the lab: {reason}")


def free_port() -> int:
    """A TCP port free on loopback now (for a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unique_lab_name(prefix: str = "t") -> str:
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def lab_factory():
    """`make(nodes=N, npus_per_node=8, chip="910B3") -> Lab`: a lab of its own, with a
    unique name, taken down at the end of the session."""
    created = []

    def make(nodes: int = 2, npus_per_node: int = 8, chip: str = "910B3"):
        require_lab()
        from ascendctl_lab import Lab

        lab = Lab(unique_lab_name())
        created.append(lab)
        return lab.up(nodes=nodes, npus_per_node=npus_per_node, chip=chip)

    yield make
    for lab in created:
        lab.down()


@pytest.fixture(scope="session")
def lab(lab_factory):
    """The session's shared 2-node lab (8 x 910B3 each). Tests that inject faults heal
    them before they finish."""
    return lab_factory(2)


GANG_ATTR = "_ascendctl_gang_lab"


@pytest.fixture(scope="module")
def gang(request, tmp_path_factory):
    """The engine suite's shared 2-node lab (the real vLLM engine on the nodes): one lab
    for every module that asks for it, handed from module to module in the order they run
    (each names the one before it in `SHARES_DEPLOYMENT_OF`), each leaving the deployment
    as its docstring says; taken down after the last module that uses it. A dict:
    `lab`, `dir` (this machine's directory for its inventories), and what the modules
    keep there (`inv`: the inventory deployed last)."""
    state = getattr(request.config, GANG_ATTR, None)
    if state is None:
        require_lab()
        from ascendctl_lab import Lab

        lab = Lab(unique_lab_name("gang"))
        request.config.add_cleanup(lambda: _gang_down(request.config))
        state = {"lab": lab.up(nodes=2), "dir": tmp_path_factory.mktemp("gang")}
        setattr(request.config, GANG_ATTR, state)
    yield state
    if not _gang_used_later(request):
        _gang_down(request.config)


def _gang_used_later(request) -> bool:
    """Whether a module that runs after this one (in this session's order) uses the gang."""
    items = request.session.items
    mine = [i for i, item in enumerate(items) if item.module is request.module]
    return any("gang" in item.fixturenames for item in items[max(mine, default=-1) + 1:])


def _gang_down(config) -> None:
    state = getattr(config, GANG_ATTR, None)
    if state is not None:
        delattr(config, GANG_ATTR)
        state["lab"].down()


ACCEPTANCE = "acceptance"


def pytest_addoption(parser):
    parser.addoption(
        "--acceptance", action="store_true",
        default=os.environ.get("ASCENDCTL_ACCEPTANCE") == "1",
        help="also run the tests marked `acceptance` (long lab tests that prove an issue's "
             "acceptance list, left out of CI's budget; env ASCENDCTL_ACCEPTANCE=1)")


def pytest_collection_modifyitems(config, items):
    """Tests marked `acceptance` are deselected unless --acceptance is given (reported as
    deselected, never as passed or skipped).

    The engine suite (lab modules that start the real vLLM) first, so that one worker
    takes it at once; and a lab module that reuses another module's deployment
    (`SHARES_DEPLOYMENT_OF = "x"`) right after it, chains followed (a module sharing the
    deployment of one that shares another's comes after both), so that deployment's
    engines are never left idle (they poll the CPU) while other modules start theirs."""
    if not config.getoption("acceptance"):
        left_out = [item for item in items if item.get_closest_marker(ACCEPTANCE)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker(ACCEPTANCE)]
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    anchors = {}
    for name, module_items in modules.items():
        anchor = getattr(getattr(module_items[0], "module", None), "SHARES_DEPLOYMENT_OF", None)
        if anchor:
            anchors[name] = f"{name.rpartition('/')[0]}/{anchor}.py"
    order = modules_in_deployment_order(list(modules), anchors)
    order.sort(key=lambda name: not in_engine_suite(name, config.rootpath))
    items[:] = [item for name in order for item in modules[name]]


def modules_in_deployment_order(modules: list[str], anchors: dict[str, str]) -> list[str]:
    """MODULES in their order, except that each module whose anchor (the module whose
    deployment it shares) is among them runs right after that anchor and the anchor's
    earlier followers. A module in an anchor cycle keeps its own place."""
    present = set(modules)
    followers: dict[str, list[str]] = {}
    roots = []
    for name in modules:
        anchor = anchors.get(name)
        if anchor in present and anchor != name:
            followers.setdefault(anchor, []).append(name)
        else:
            roots.append(name)
    placed: list[str] = []
    seen: set[str] = set()

    def place(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        placed.append(name)
        for follower in followers.get(name, []):
            place(follower)

    for name in roots:
        place(name)
    placed += [name for name in modules if name not in seen]     # cycles
    return placed


LAB_TESTS = "tests/lab/"


ENGINE_FREE = re.compile(r"^ENGINE_FREE\s*=\s*True\b", re.MULTILINE)


@functools.cache
def in_engine_suite(path: str, root: Path) -> bool:
    """A lab module is in the engine suite unless it declares `ENGINE_FREE = True` (it
    starts no vLLM process: the stand-in engine, or none)."""
    if not path.startswith(LAB_TESTS):
        return False
    try:
        return not ENGINE_FREE.search((root / path).read_text())
    except OSError:
        return True


def work_unit_of(nodeid: str, root: Path) -> str:
    """With pytest-xdist, the engine suite is one unit of work (one worker runs it in
    order: the machine has the cores for one lab's engines, at most two vLLM processes);
    every other test file, engine-free lab modules included, is a unit of its own, run on
    the other worker beside it."""
    path = nodeid.split("::", 1)[0]
    return "lab" if in_engine_suite(path, root) else path


@pytest.hookimpl(optionalhook=True)   # only called when pytest-xdist is installed
def pytest_xdist_make_scheduler(config, log):
    # xdist's own `loadgroup` marks a group by renaming the item's nodeid, which pytest 9.2
    # no longer reads: the lab tests would be spread over both workers, two labs' engines
    # at once. Group by path instead, in xdist's scope scheduler.
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LabSuiteOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit_of(nodeid, config.rootpath)

    return LabSuiteOnOneWorker(config, log)


_module_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Wall time per test file (setup, call and teardown: a module's lab and deployment
    are paid in its first setup and last teardown)."""
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """The cost of the suite per lab module (and the unit tests as one line), for CI's
    budget: the closing line of every run says where the minutes went."""
    if not _module_seconds:
        return
    lab = {m: s for m, s in _module_seconds.items() if m.startswith("tests/lab/")}
    other = sum(s for m, s in _module_seconds.items() if m not in lab)
    terminalreporter.section("time per module")
    for module, seconds in sorted(lab.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.0f} s  {module}")
    terminalreporter.write_line(f"{other:8.0f} s  every other test module "
                                f"({len(_module_seconds) - len(lab)} files)")
    terminalreporter.write_line(f"{sum(_module_seconds.values()):8.0f} s  in all")
