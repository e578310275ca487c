"""`ascendctl bench` on a lab deployment: vLLM's own figures, a pass/fail verdict against
the inventory's SLOs (one inventory whose SLOs pass, one with an SLO that fails), the
result stored with the release and shown by `history`, the API key only ever in the
benchmark's environment.

The deployment (2 nodes, PP=2, API key) is the one test_health_lab.py made on the engine
suite's shared lab (`gang`, tests/conftest.py; deployed here when this module runs alone),
and test_doctor_lab.py produces its failures on it next.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from tests.lab.health_helpers import API_KEY, ascendctl
from tests.lab.health_helpers import deploy as deploy_group
from tests.lab.health_helpers import inventory as gang_inventory

# Waiting for engine slots on a shared machine and a deploy can take longer than the
# default per-test timeout.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(5400)]

# ... and runs right after that module (tests/conftest.py), while its engines are up.
SHARES_DEPLOYMENT_OF = "test_health_lab"
ROOT = "/var/lib/ascendctl"
TINY = ["--input-len", "32", "--output-len", "16", "--num-prompts", "8", "--concurrency", "4"]


# A real vLLM engine: `vllm serve` (API server, or a headless rank) and its engine cores;
# the lab's stand-in for `vllm serve` (engine-free lab modules, run beside this one by
# tests/conftest.py) is not one.
ENGINE_PROCESS = re.compile(r"\bvllm serve |^VLLM::EngineCore")
STANDIN = "/opt/ascendctl-standin/"


def other_engines() -> list[str]:
    """Real vLLM engines on this machine (any lab's)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if ENGINE_PROCESS.search(line) and STANDIN not in line]


def wait_for_engine_slots(limit_s: float = 3600) -> None:
    """At most two engines may run on this machine at once: before starting ours, wait
    until no other real engine runs (in CI the engine suite runs on one worker, so none
    does; a second session on the same machine would); never start ours next to someone
    else's."""
    deadline = time.time() + limit_s
    while busy := other_engines():
        if time.time() > deadline:
            pytest.fail(f"other vLLM engines kept running for {limit_s:.0f} s; not starting "
                        "two more on this machine:\n" + "\n".join(busy[:4]), pytrace=False)
        time.sleep(5)


def write_inventory(state: dict, name: str, slo: dict | None = None) -> Path:
    """The deployed inventory (the lab's, with the API key and the health policy), with
    SLO as its `slo` section."""
    path = gang_inventory(state, name)
    if slo is not None:
        data = yaml.safe_load(path.read_text())
        data["all"]["vars"]["slo"] = slo
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def node_sh(state: dict, node: str, script: str, timeout: float = 120) -> str:
    return state["lab"].exec(node, ["sh", "-c", script], timeout=timeout).stdout


def serving(state: dict) -> bool:
    out = node_sh(state, "node1", "curl -s -o /dev/null -w '%{http_code}' --max-time 20 "
                  f"-H 'Authorization: Bearer {API_KEY}' "
                  f"http://{state['lab'].nodes[0].mgmt_ip}:8000/v1/models || true")
    return out.strip() == "200"


def ensure_serving(state: dict) -> None:
    if serving(state):
        return
    wait_for_engine_slots()
    report = deploy_group(state, "mp")
    state["release"] = report["outcome"]["release_id"]
    assert serving(state)


def shared_deployment(gang: dict) -> dict:
    """The shared lab's PP=2 deployment with the API key, serving (deployed if it is not:
    this module or test_doctor_lab.py run alone)."""
    ensure_serving(gang)
    return gang


@pytest.fixture(scope="module")
def deployment(gang):
    return shared_deployment(gang)


def stored_vllm_result(state: dict, stamp: str, release: str) -> dict:
    return json.loads(node_sh(state, "node0", f"cat {ROOT}/bench/{release}/{stamp}.vllm.json"))


FIND_BENCH = """
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"bench" in argv and b"serve" in argv and any(a.endswith(b"vllm") for a in argv):
        print(repr((pid, argv, env)))
"""


def watch_bench_process(state: dict, found: dict, stop: threading.Event) -> None:
    """While bench runs: the `vllm bench serve` process on the head, its argv and env."""
    import ast

    while not stop.is_set() and "argv" not in found:
        out = state["lab"].exec("node0", ["python3", "-c", FIND_BENCH], check=False).stdout
        for line in out.splitlines():
            _pid, argv, env = ast.literal_eval(line)
            found.update(argv=[a.decode() for a in argv if a],
                         env=[e.decode() for e in env if e])
        time.sleep(0.3)


def test_bench_reports_vllm_figures_and_passes_the_lab_slos(deployment):
    state = deployment
    inv = write_inventory(state, "pass", slo={"min_output_tokens_per_s_per_npu": 0.5,
                                              "max_p99_ttft_ms": 60000,
                                              "max_p99_tpot_ms": 10000})
    junit = state["dir"] / "bench-pass.xml"
    found: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch_bench_process, args=(state, found, stop))
    watcher.start()
    try:
        result = ascendctl("bench", "-i", str(inv), *TINY, "--json", "--junit", str(junit))
    finally:
        stop.set()
        watcher.join()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    release = report["release"]
    assert release == node_sh(state, "node0", f"readlink {ROOT}/current").strip().split("/")[-1]
    # the figures are vLLM's own: the same numbers as the result file vLLM wrote
    raw = stored_vllm_result(state, report["stamp"], release)
    figures = report["figures"]
    assert figures["completed"] == raw["completed"] == 8 and figures["failed"] == 0
    assert figures["output_throughput"] == raw["output_throughput"] > 0
    assert figures["latency_ms"]["ttft"]["p99"] == raw["p99_ttft_ms"]
    assert figures["latency_ms"]["tpot"]["p99"] == raw["p99_tpot_ms"]
    # random prompts of 32 tokens (vLLM re-aligns them to the server's tokenizer: about
    # 32), and exactly 16 tokens out (the random dataset ignores EOS)
    assert raw["total_output_tokens"] == 8 * 16
    assert abs(raw["total_input_tokens"] - 8 * 32) <= 8 * 3
    verdict = report["verdict"]
    assert verdict["status"] == "pass" and verdict["npus"] == 2
    assert verdict["output_tokens_per_s_per_npu"] == pytest.approx(raw["output_throughput"] / 2)
    assert [c["status"] for c in verdict["checks"]] == ["pass"] * 3
    assert JUnitXml.fromfile(str(junit)).failures == 0
    # the API key reached the benchmark through its environment, never its command line
    assert found.get("argv"), "the bench process was never seen on the head"
    assert API_KEY not in " ".join(found["argv"])
    assert f"OPENAI_API_KEY={API_KEY}" in found["env"]
    assert "--tokenizer" in found["argv"] and f"{ROOT}/releases/{release}/model" in found["argv"]
    state["bench_pass"] = report


def test_bench_fails_an_slo_it_misses_and_history_shows_it(deployment):
    state = deployment
    inv = write_inventory(state, "fail", slo={"min_output_tokens_per_s_per_npu": 0.5,
                                              "max_p99_tpot_ms": 0.001})
    junit = state["dir"] / "bench-fail.xml"
    result = ascendctl("bench", "-i", str(inv), *TINY, "--junit", str(junit))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "FAIL: p99 time per output token" in out and "(SLO <= 0.001 ms)" in out
    assert re.search(r"output throughput per NPU \(2 NPUs\)\s.*>= 0\.5\s.*pass", out)
    cases = {c.name: c for suite in JUnitXml.fromfile(str(junit)) for c in suite}
    assert not cases["slo.max_p99_tpot_ms"].is_passed
    assert cases["slo.min_output_tokens_per_s_per_npu"].is_passed

    history = ascendctl("history", "-i", str(inv), "--json", timeout=120)
    assert history.returncode == 0, history.stderr[-2000:]
    data = json.loads(history.stdout)
    [entry] = [r for r in data["releases"] if r["current_on"] == ["node0", "node1"]]
    assert entry["bench"]["verdict"] == "fail"          # the latest run of this release
    stored = json.loads(node_sh(state, "node0", f"ls -1 {ROOT}/bench/{entry['id']}/*.json "
                                "| grep -v vllm.json | tail -1 | xargs cat"))
    assert entry["bench"]["figures"]["p99_tpot_ms"] == \
        stored["figures"]["latency_ms"]["tpot"]["p99"]
    events = [e for e in data["events"] if e.get("event") == "bench"]
    assert [e["verdict"] for e in events[-2:]] == ["pass", "fail"]
    table = ascendctl("history", "-i", str(inv), timeout=120)
    assert "fail:" in table.stdout and "tok/s/NPU" in table.stdout

    # nowhere but in the 0600 secrets.env
    leaks = node_sh(state, "node0", f"grep -rl {API_KEY} {ROOT}/bench {ROOT}/history.jsonl "
                                    "|| true")
    assert leaks.strip() == ""
    for text in (result.stdout, result.stderr, junit.read_text(), history.stdout,
                 json.dumps(state.get("bench_pass", {}))):
        assert API_KEY not in text


def test_bench_refuses_settings_the_deployment_cannot_serve(deployment):
    result = ascendctl("bench", "-i", str(deployment["inv"]), "--input-len", "512",
                       timeout=120)
    assert result.returncode == 2
    assert "exceeds serving.max_model_len 256" in result.stderr
