"""Prefill/decode disaggregation against the real engine (vLLM's CPU build serving the lab's
tiny model): `lab up --pd` puts prefill on node0 and decode on node1, one PD unit, with
vLLM's ExampleConnector moving each prompt's KV through the lab's shared directory and
vllm-router (node0) sending each request to prefill, then to decode, behind nginx on node0.
One deployment, shared by the tests, in this order:

1. completions and streams through the gateway, with the API key (a wrong key is refused
   at the gateway, although the router calls the engines with its own key); the decode
   engine's own counters show the prompts' KV came from its connector, and `status --json`
   names each node's role and counts the router's requests and the decode's external KV
   tokens; 16 greedy answers through the unit equal those of the same model answering
   without disaggregation (the prefill engine's own API server) at >= 0.99;
2. `kill -9` of the prefill engine, then of the decode engine: `status` is not healthy
   within 15 s, naming the role and the node; the unit's supervisor restarts both sides
   and the router in order, and the unit serves again within start-up + 60 s.

Two engines at most. Run under the machine's engine slot:
`flock /run/lock/ascendctl-engine-slot .venv/bin/pytest tests/lab/test_pd_lab.py`.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from ascendctl_runtime.probe import parse_metrics

from tests.conftest import require_lab, unique_lab_name
from tests.lab.health_helpers import ascendctl

ENGINE_UNIT = "ascendctl-engine.service"
# 16 prompts of 40+ tokens: with 32-token blocks each moves at least one block of KV
PROMPTS = [f"Story {i}: in the old harbour town the fishermen told the travellers about the "
           f"lighthouse keeper, the storms of the winter and the ship that came back after "
           f"{i + 2} years, and then one of them said" for i in range(16)]


def status_json(inv: Path) -> dict:
    result = ascendctl("status", "-i", str(inv), "--json", timeout=180)
    return json.loads(result.stdout)


def complete(url: str, key: str | None, prompt: str, *, max_tokens: int = 12,
             stream: bool = False) -> tuple[int, str]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": stream}
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = answer.read().decode()
            if not stream:
                return answer.status, json.loads(text)["choices"][0]["text"]
            chunks = [json.loads(line[6:])["choices"][0]["text"] for line in text.splitlines()
                      if line.startswith("data: {")]
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
            return answer.status, "".join(chunks)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()[:300]


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("pd")).up(nodes=2, pd=True)
    try:
        inv = Path(lab.inventory_path)
        data = yaml.safe_load(inv.read_text())
        node0 = data["all"]["children"]["nodes"]["children"]["unit0"]["hosts"]["node0"]
        directory = tmp_path_factory.mktemp("pd")
        prompts = directory / "prompts.yaml"
        prompts.write_text(yaml.safe_dump([{"id": f"story-{i}", "prompt": p}
                                           for i, p in enumerate(PROMPTS)]))
        data["all"]["vars"]["slo"]["quality"] = {
            "agree_with_previous": True, "min_agreement": 0.99, "prompts": str(prompts),
            "max_tokens": 16}
        state = {"lab": lab, "dir": directory, "data": data, "node0": node0["ansible_host"],
                 "gateway": f"http://{node0['ansible_host']}:"
                            f"{data['all']['vars']['serving']['proxy']['port']}",
                 "key": lab.api_key_file.read_text().strip(),
                 "plain": write(directory, "plain", without_pd(data)),
                 "inv": write(directory, "pd", data)}
        for name in ("plain", "inv"):       # the reference first, then PD through the gate
            started = time.monotonic()
            result, report = deploy(state[name])
            assert result.returncode == 0, report["summary"] + result.stderr[-3000:]
            state[f"release_{name}"] = report["outcome"]["release_id"]
            print(f"\n{name} deploy: {time.monotonic() - started:.0f} s")
        yield state
    finally:
        lab.down()


def without_pd(data: dict) -> dict:
    """The same two nodes and engine flags without disaggregation: one data-parallel group
    of two ranks, one per node (each a whole engine, as each PD side is)."""
    plain = copy.deepcopy(data)
    vars_ = plain["all"]["vars"]
    del vars_["pd"]
    del plain["all"]["children"]["prefill"], plain["all"]["children"]["decode"]
    vars_["serving"].update(data_parallel_size=2, data_parallel_size_local=1)
    return plain


def write(directory: Path, name: str, data: dict) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def deploy(inv: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json", *extra)
    try:
        return result, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(result.stdout[-3000:] + result.stderr[-3000:]) from None


def history(inv: Path) -> dict:
    result = ascendctl("history", "-i", str(inv), "--json", timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(result.stdout)


def decode_counters(state: dict) -> dict[str, float]:
    text = state["lab"].exec("node1", ["curl", "-s", "http://127.0.0.1:8000/metrics"],
                             timeout=60).stdout
    return parse_metrics(text, ("vllm:external_prefix_cache_hits_total",
                                "vllm:prompt_tokens_total"))


def test_p1_the_unit_serves_through_the_gateway_with_kv_from_prefill(pd):
    before = decode_counters(pd)
    status, text = complete(pd["gateway"], pd["key"], PROMPTS[0])
    assert status == 200 and text, text
    status, streamed = complete(pd["gateway"], pd["key"], PROMPTS[0], stream=True)
    assert status == 200 and streamed == text
    # the router calls the engines with its own key: the gateway checks the client's
    assert complete(pd["gateway"], None, PROMPTS[1])[0] == 401
    assert complete(pd["gateway"], "sk-wrong", PROMPTS[1])[0] == 401

    disaggregated = [complete(pd["gateway"], pd["key"], p)[1] for p in PROMPTS]
    alone = [complete(f"http://{pd['node0']}:8000", pd["key"], p)[1] for p in PROMPTS]
    agreement = sum(a == b for a, b in zip(disaggregated, alone)) / len(PROMPTS)
    assert agreement >= 0.99, list(zip(disaggregated, alone))

    after = decode_counters(pd)
    # each of the 18 prompts through the unit moved at least one 32-token block to decode
    assert after["vllm:external_prefix_cache_hits_total"] - \
        before["vllm:external_prefix_cache_hits_total"] >= 18 * 32, (before, after)

    # the deploy's quality gate: PD's greedy answers against those of the release without
    # PD it replaced, on the 16 prompts
    gate = {r["id"]: r for r in history(pd["inv"])["releases"]}[pd["release_inv"]]["quality"]
    assert gate["status"] == "pass" and gate["agreement"]["mean"] >= 0.99, gate

    report = status_json(pd["inv"])
    assert report["verdict"] == "healthy", report["reasons"]
    roles = {n["name"]: (n["role"], n["rank"]) for n in report["nodes"]}
    assert roles == {"node0": ("prefill", 0), "node1": ("decode", 0)}
    kv = report["groups"][0]["kv_transfer"]
    assert kv["requests"] >= 18 and kv["decode_requests"] >= 18, kv
    assert kv["decode_external_hit_tokens"] == after["vllm:external_prefix_cache_hits_total"]


def supervisor(pd: dict) -> dict:
    return status_json(pd["inv"])["groups"][0]["supervisor"]


def kill_engine_and_wait(pd: dict, node: str, role: str) -> tuple[float, float]:
    """SIGKILL the engine of NODE; (s until status names it, s until the unit's supervisor
    has recovered it and the gateway answers)."""
    lab = pd["lab"]
    recovered = supervisor(pd)["recoveries_total"]
    pid = lab.exec(node, ["systemctl", "show", "-p", "MainPID", "--value", ENGINE_UNIT],
                   timeout=60).stdout.strip()
    assert pid and pid != "0"
    killed = time.monotonic()
    lab.exec(node, ["sh", "-c", f"kill -9 -- -$(ps -o pgid= -p {pid} | tr -d ' ') "
                                f"|| kill -9 {pid}"], timeout=60)
    noticed = None
    while noticed is None and time.monotonic() - killed < 60:
        report = status_json(pd["inv"])
        named = [r for r in report["reasons"] if role in r and node in r]
        if report["verdict"] != "healthy" and named:
            noticed = time.monotonic() - killed
    assert noticed is not None and noticed <= 15, f"status did not name {role} {node}"
    deadline = killed + 300 + 60          # serving.startup_timeout + 60 s
    while time.monotonic() < deadline:
        state = supervisor(pd)
        if state["recoveries_total"] > recovered and state["phase"] == "serving" and \
                complete(pd["gateway"], pd["key"], PROMPTS[2])[0] == 200:
            return noticed, time.monotonic() - killed
        time.sleep(2)
    events = lab.exec("node0", ["journalctl", "-u", "ascendctl-supervisor", "--no-pager",
                                "-o", "cat"], timeout=60).stdout
    raise AssertionError(f"the unit did not serve again within 360 s after {role} died:\n"
                         + events[-3000:])


def test_p2_a_killed_prefill_then_decode_engine_restarts_the_unit_in_order(pd):
    noticed, served = kill_engine_and_wait(pd, "node0", "prefill")
    print(f"\nprefill killed: named after {noticed:.1f} s, serving again after {served:.0f} s")
    noticed, served = kill_engine_and_wait(pd, "node1", "decode")
    print(f"decode killed: named after {noticed:.1f} s, serving again after {served:.0f} s")
    last = supervisor(pd)["last_recovery"]
    assert "node1" in last["cause"], last
    events = pd["lab"].exec("node0", ["journalctl", "-u", "ascendctl-supervisor", "--no-pager",
                                      "-o", "cat"], timeout=60).stdout
    print("\n".join(line for line in events.splitlines() if "recovery" in line))


def test_p3_a_changed_decode_setting_passes_the_gate_and_altered_weights_are_rolled_back(pd):
    from tests.lab.quality_helpers import SCALE, SCALED_TENSOR, scaled_copy

    changed = copy.deepcopy(pd["data"])
    changed["all"]["vars"]["pd"]["decode"]["max_num_seqs"] = 4
    result, report = deploy(write(pd["dir"], "decode-seqs", changed))
    assert result.returncode == 0, report["summary"] + result.stderr[-3000:]
    release_d = report["outcome"]["release_id"]
    assert release_d != pd["release_inv"]
    gate = {r["id"]: r for r in history(pd["inv"])["releases"]}[release_d]["quality"]
    assert gate["status"] == "pass" and gate["agreement"]["mean"] >= 0.99, gate

    altered = pd["dir"] / "model-scaled"
    scaled_copy(pd["lab"].model_dir, altered, SCALED_TENSOR, SCALE)
    changed["all"]["vars"]["model"]["source"] = str(altered)
    result, report = deploy(write(pd["dir"], "altered", changed))
    assert result.returncode == 6, report["summary"] + result.stderr[-3000:]
    release_e = report["outcome"]["release_id"]
    assert "quality gate (agree_with_previous) failed" in report["summary"], report["summary"]
    assert f"back on {release_d}" in report["summary"], report["summary"]
    releases = {r["id"]: r for r in history(pd["inv"])["releases"]}
    assert releases[release_e]["status"] == "failed"
    # the previous PD release serves again, through prefill and decode
    status = status_json(pd["inv"])
    assert status["verdict"] == "healthy", status["reasons"]
    assert {n["release"] for n in status["nodes"]} == {release_d}
    assert complete(pd["gateway"], pd["key"], PROMPTS[3])[0] == 200
