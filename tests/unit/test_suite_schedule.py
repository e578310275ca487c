"""The README's test command (`pytest -n 2 --dist loadgroup`) runs the lab suite on one
worker, in order, and the other test files beside it: run it on a small tree of tests
with the repository's conftest and record where and in which order each test ran."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CONFTEST = Path(__file__).parents[1] / "conftest.py"

RECORDING_TEST = '''
import json, os, time
{extra}
def _record(name):
    with open({log!r}, "a") as log:
        log.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], __name__, name]) + "\\n")
    time.sleep({pause})

{tests}
'''


def write_module(path: Path, log: Path, count: int, extra: str = "",
                 pause: float = 0.05) -> None:
    tests = "\n".join(f"def test_{i}():\n    _record({i})\n" for i in range(count))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECORDING_TEST.format(extra=extra, log=str(log), tests=tests, pause=pause))


def test_the_lab_suite_runs_in_order_on_one_worker_beside_the_other_tests(tmp_path):
    tree = tmp_path / "tree"
    log = tmp_path / "ran.jsonl"
    (tree / "tests").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(CONFTEST, tree / "tests" / "conftest.py")
    # the engine suite is slow (its modules start vLLM); the engine-free lab module sorts
    # first, yet runs as a unit of its own beside the suite
    write_module(tree / "tests/lab/test_a_anchor.py", log, 4, pause=0.5)
    write_module(tree / "tests/lab/test_b_other.py", log, 4, pause=0.5)
    write_module(tree / "tests/lab/test_c_shares.py", log, 4, pause=0.5,
                 extra='SHARES_DEPLOYMENT_OF = "test_a_anchor"')
    write_module(tree / "tests/lab/test_0_free.py", log, 4,
                 extra="ENGINE_FREE = True")
    for name in ("test_u1", "test_u2", "test_u3"):
        write_module(tree / f"tests/unit/{name}.py", log, 6)

    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "-q", "tests"],
                          cwd=tree, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ran = [json.loads(line) for line in log.read_text().splitlines()]
    lab_modules = ("test_a_anchor", "test_b_other", "test_c_shares")
    lab = [(module, test) for _, module, test in ran if module in lab_modules]
    lab_workers = {worker for worker, module, _ in ran if module in lab_modules}
    unit_workers = {worker for worker, module, _ in ran if module not in lab_modules}
    assert len(lab_workers) == 1, ran
    (lab_worker,) = lab_workers
    # the engine suite is the first thing its worker ran, and nothing else ran there
    # until it was done (6 s): the free lab module and the unit files went beside it
    on_lab_worker = [module for worker, module, _ in ran if worker == lab_worker]
    assert on_lab_worker[:12] == [m for m in ("test_a_anchor", "test_c_shares",
                                              "test_b_other") for _ in range(4)], ran
    assert {w for w, module, _ in ran if module == "test_0_free"} == unit_workers - lab_workers
    # in order, and the module sharing the anchor's deployment right after the anchor
    assert lab == [(module, i) for module in ("test_a_anchor", "test_c_shares", "test_b_other")
                   for i in range(4)]
    assert len(ran) == 12 + 4 + 18
    assert unit_workers - lab_workers, "no unit test ran beside the lab suite"


def test_a_chain_of_shared_deployments_runs_in_chain_order_whatever_the_file_order():
    from tests.conftest import modules_in_deployment_order

    modules = ["t/bench.py", "t/doctor.py", "t/container.py", "t/health.py", "t/dp.py",
               "t/venv.py", "t/weights.py", "t/replicas.py"]
    # each names the module whose deployment it takes over; files sort otherwise
    anchors = {"t/bench.py": "t/health.py", "t/doctor.py": "t/bench.py",
               "t/dp.py": "t/doctor.py", "t/venv.py": "t/dp.py", "t/weights.py": "t/venv.py"}
    assert modules_in_deployment_order(modules, anchors) == [
        "t/container.py", "t/health.py", "t/bench.py", "t/doctor.py", "t/dp.py", "t/venv.py",
        "t/weights.py", "t/replicas.py"]
    # an anchor that is not collected (a run of one file) leaves the module in place; a
    # cycle keeps every module, once
    assert modules_in_deployment_order(["t/doctor.py", "t/a.py"], anchors) == \
        ["t/doctor.py", "t/a.py"]
    cycle = {"t/a.py": "t/b.py", "t/b.py": "t/a.py"}
    assert sorted(modules_in_deployment_order(["t/a.py", "t/b.py", "t/c.py"], cycle)) == \
        ["t/a.py", "t/b.py", "t/c.py"]


@pytest.mark.parametrize("opt_in", [[], ["--acceptance"], "env"])
def test_an_acceptance_test_is_deselected_unless_asked_for(tmp_path, opt_in):
    """A test marked `acceptance` (out of CI's budget) is reported as deselected, never run
    or passed, unless --acceptance (or ASCENDCTL_ACCEPTANCE=1) asks for it; the tests
    before it in its module run either way."""
    import os

    tree = tmp_path / "tree"
    log = tmp_path / "ran.jsonl"
    (tree / "tests/lab").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\nmarkers =\n    acceptance: long\n")
    shutil.copy(CONFTEST, tree / "tests" / "conftest.py")
    write_module(tree / "tests/lab/test_m.py", log, 2, pause=0,
                 extra="import pytest\n\n@pytest.mark.acceptance\ndef test_long():\n"
                       "    _record('long')\n")
    env = {k: v for k, v in os.environ.items() if k != "ASCENDCTL_ACCEPTANCE"}
    env["PYTEST_XDIST_WORKER"] = "gw0"      # what the recording test writes down
    if opt_in == "env":
        env["ASCENDCTL_ACCEPTANCE"] = "1"
    args = opt_in if isinstance(opt_in, list) else []
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--strict-markers", "tests", *args],
                          cwd=tree, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [test for _, _, test in map(json.loads, log.read_text().splitlines())]
    if opt_in:
        assert sorted(map(str, ran)) == ["0", "1", "long"] and "3 passed" in done.stdout, ran
    else:
        assert ran == [0, 1], ran
        assert "2 passed, 1 deselected" in done.stdout, done.stdout
