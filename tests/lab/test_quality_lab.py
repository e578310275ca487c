"""The quality gate against the real engine (vLLM's CPU build serving the lab's tiny
model): `ascendctl bench --quality` on one lab deployment shared by every test here, in
order:

1. the first release gated in "agree with previous" mode has nothing to agree with: its
   greedy answers (with vLLM's token ids) are recorded as the reference;
2. a prompt set whose expected answers are what the model really answers passes;
3. a prompt set with a wrong expected answer fails, naming the prompt, what was expected
   and what came back (text, JSON, JUnit);
4. release B changes nothing the model computes (max_num_seqs): it agrees with A's
   recorded answers and passes;
5. release C serves weights that are structurally valid but altered (one tensor scaled):
   the deploy's own gate refuses it (exit 6, naming the gate) and B serves again;
6. `history` shows each release's latest gate result (A's: the wrong prompt set's); the
   API key is nowhere but in the releases' 0600 secrets.env.

The lab's default layout, two nodes in PP=2 (two engines; the head serves). A one-node
deploy would halve that, but on this branch's deploy a one-host run_once task that fans
out over the pool (the weights push) waits forever for the pool's only worker; the
deploy redesign runs run_once tasks in the runner's own thread. Run under the machine's
engine slot:
`flock /run/lock/ascendctl-engine-slot .venv/bin/pytest tests/lab/test_quality_lab.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from tests.conftest import require_lab, unique_lab_name

pytestmark = [pytest.mark.lab, pytest.mark.timeout(3600)]

API_KEY = "sk-lab-quality-" + "7e3a90c1d2b4f658"
KEY_ENV = "ASCENDCTL_TEST_QUALITY_KEY"
ROOT = "/var/lib/ascendctl"
NODES = 2
SCALED_TENSOR = "model.layers.1.mlp.down_proj.weight"
SCALE = 8.0
CHAT_PROMPTS = [
    {"id": "chat-hello", "messages": [{"role": "user", "content": "Hello, how are you?"}]},
    {"id": "chat-system", "messages": [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "What does the operator check before a deploy?"}]},
]


def ascendctl(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, KEY_ENV: API_KEY, "ASCENDCTL_PLAIN": "1"}
    return subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def write_inventory(state: dict, name: str, *, quality: dict | None = None,
                    serving: dict | None = None, model_source: Path | None = None) -> Path:
    data = yaml.safe_load(Path(state["lab"].inventory_path).read_text())
    vars_ = data["all"]["vars"]
    vars_["serving"].update({"api_key": {"env": KEY_ENV}, "startup_timeout": 900,
                             **(serving or {})})
    if model_source is not None:
        vars_["model"]["source"] = str(model_source)
    if quality is not None:
        vars_["slo"] = {"quality": quality}
    path = state["dir"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def deploy(inv: Path) -> str:
    result = ascendctl("deploy", "-i", str(inv), "--yes", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)["outcome"]["release_id"]


def node_sh(state: dict, script: str) -> str:
    return state["lab"].exec("node0", ["sh", "-c", script], timeout=120).stdout


def gate(inv: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    result = ascendctl("bench", "-i", str(inv), "--quality", "--json", *extra, timeout=900)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = None
    return result, report


def agreement_prompt_file(directory: Path) -> Path:
    """The built-in prompt set plus two chat prompts (both endpoints, real engine)."""
    from ascendctl.paths import package_data

    builtin = yaml.safe_load((package_data("ascendctl.inventory") / "data" /
                              "agreement_prompts.yaml").read_text())
    path = directory / "agree.yaml"
    path.write_text(yaml.safe_dump(builtin + CHAT_PROMPTS, sort_keys=False,
                                   allow_unicode=True))
    return path


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """One lab with release A (the lab's tiny model) deployed."""
    require_lab()
    from ascendctl_lab import Lab

    lab = Lab(unique_lab_name("h6q")).up(nodes=NODES)
    try:
        directory = tmp_path_factory.mktemp("quality")
        state = {"lab": lab, "dir": directory, "reports": {}}
        state["agree_prompts"] = agreement_prompt_file(directory)
        state["agree"] = {"agree_with_previous": True, "min_agreement": 0.9,
                          "prompts": str(state["agree_prompts"]), "max_tokens": 24}
        state["inv_a"] = write_inventory(state, "a", quality=state["agree"])
        state["release_a"] = deploy(state["inv_a"])
        yield state
    finally:
        lab.down()


def test_the_first_release_records_its_greedy_answers_as_the_reference(state):
    result, report = gate(state["inv_a"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["release"] == state["release_a"] and report["status"] == "pass"
    assert report["mode"] == "agree_with_previous"
    assert report["reference"]["kind"] == "none" and report["agreement"] is None
    prompts = report["prompts"]
    assert [p["id"] for p in prompts][-2:] == ["chat-hello", "chat-system"]
    for prompt in prompts:
        assert prompt["error"] is None, prompt
        # vLLM's own token ids, at most max_tokens of them; the text is what they decode to
        assert 1 <= len(prompt["token_ids"]) <= 24 and all(isinstance(t, int)
                                                          for t in prompt["token_ids"])
        assert prompt["finish_reason"] in ("length", "stop")
    assert len({tuple(p["token_ids"]) for p in prompts}) > len(prompts) // 2
    stored = node_sh(state, f"cat {report['stored']}")
    record = json.loads(stored)
    assert report["stored"].startswith(f"{ROOT}/quality/{state['release_a']}/")
    assert [p["token_ids"] for p in record["prompts"]] == [p["token_ids"] for p in prompts]
    # greedy is deterministic: a second run answers the same, token for token
    again, second = gate(state["inv_a"], "--baseline")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert second["reference"]["kind"] == "baseline"
    same = sum(1 for a, b in zip(prompts, second["prompts"]) if a["token_ids"] == b["token_ids"])
    print(f"\nrelease A answered twice: {same}/{len(prompts)} prompts identical")
    assert same >= len(prompts) - 1
    state["reports"]["a"] = report


def real_answer_prompts(state: dict, wrong: str | None = None) -> Path:
    """Three prompts of the set, each expecting what release A really answered (exact
    text, a substring of it, a regular expression of its start), and one chat prompt."""
    answers = {p["id"]: p for p in state["reports"]["a"]["prompts"]}
    source = {e["id"]: e for e in yaml.safe_load(state["agree_prompts"].read_text())}
    capital, python, story = answers["capital"], answers["python"], answers["story"]
    chat = answers["chat-hello"]
    assert capital["text"] and python["text"] and story["text"]
    entries = [
        {"id": "capital", "prompt": source["capital"]["prompt"], "exact": capital["text"]},
        {"id": "python", "prompt": source["python"]["prompt"],
         "contains": python["text"][2:8] or python["text"]},
        {"id": "story", "prompt": source["story"]["prompt"],
         "regex": "^" + re.escape(story["text"][:6])},
        {"id": "chat-hello", "messages": source["chat-hello"]["messages"],
         "exact": chat["text"]},
    ]
    if wrong is not None:
        entries[1]["contains"] = wrong
    # JSONL: JSON escapes every character a random model may answer with (YAML writers
    # leave some, such as U+0085, that YAML readers take for line breaks)
    path = state["dir"] / ("wrong.jsonl" if wrong else "right.jsonl")
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return path


def test_a_prompt_set_of_the_models_real_answers_passes(state):
    prompts = real_answer_prompts(state)
    inv = write_inventory(state, "right", quality={"prompts": str(prompts), "max_tokens": 24})
    junit = state["dir"] / "right.xml"
    result, report = gate(inv, "--junit", str(junit))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["mode"] == "prompts" and report["status"] == "pass"
    assert [(p["id"], p["status"], p["expect_ok"]) for p in report["prompts"]] == \
        [("capital", "pass", True), ("python", "pass", True), ("story", "pass", True),
         ("chat-hello", "pass", True)]
    suite = JUnitXml.fromfile(str(junit))
    assert suite.tests == 4 and suite.failures == 0


def test_a_wrong_expected_answer_fails_and_shows_what_came_back(state):
    prompts = real_answer_prompts(state, wrong="Paris is the capital")
    inv = write_inventory(state, "wrong", quality={"prompts": str(prompts), "max_tokens": 24})
    junit = state["dir"] / "wrong.xml"
    result = ascendctl("bench", "-i", str(inv), "--quality", "--junit", str(junit),
                       timeout=900)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    python = next(p for p in state["reports"]["a"]["prompts"] if p["id"] == "python")
    out = result.stdout
    assert "FAIL: quality gate (prompts) failed on node0" in out
    assert "1 of 4 prompts failed (python: expected contains \"Paris is the capital\"" in out
    # which prompt, what was expected, what came back
    from ascendctl.inventory.prompts import truncate
    from ascendctl.junit import xml_text

    assert "python ('def fibonacci(n):" in out
    assert f"got {truncate(python['text'], 120)!r}" in out
    cases = {c.name: c for suite in JUnitXml.fromfile(str(junit)) for c in suite}
    assert not cases["prompt.python"].is_passed
    assert [name for name, case in cases.items() if case.is_passed] == \
        ["prompt.capital", "prompt.story", "prompt.chat-hello"]
    failure = cases["prompt.python"].result[0]
    assert "Paris is the capital" in failure.message
    assert xml_text(truncate(python["text"], 400)) in failure.text
    _again, report = gate(inv)
    [failed] = [p for p in report["prompts"] if p["status"] == "fail"]
    assert failed["id"] == "python" and failed["text"] == python["text"]


def test_a_release_that_changes_nothing_the_model_computes_agrees(state):
    inv_b = write_inventory(state, "b", quality=state["agree"], serving={"max_num_seqs": 4})
    release_b = deploy(inv_b)
    assert release_b != state["release_a"]
    # what a rolling deploy asks before it switches: does A have answers to agree with?
    from ascendctl.load import load_inventory
    from ascendctl.quality.gate import has_recorded_answers
    from ascendctl.transport import SshPool

    inv = load_inventory(inv_b)
    with SshPool([inv.head]) as pool:
        conn = pool.conn(inv.head.name)
        assert has_recorded_answers(inv, state["release_a"], conn)
        # the deploy gated B before it took traffic, and recorded B's answers doing so
        assert has_recorded_answers(inv, release_b, conn)
    result, report = gate(inv_b)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert report["release"] == release_b
    assert report["reference"]["kind"] == "record"
    assert report["reference"]["release"] == state["release_a"]
    agreement = report["agreement"]
    print(f"\nunchanged model (max_num_seqs 8 -> 4): agreement {agreement['mean']:.4f}, "
          f"{agreement['exact_rate']:.0%} identical over {agreement['compared']} prompts")
    assert agreement["mean"] >= 0.9
    state["release_b"], state["inv_b"] = release_b, inv_b


def scaled_copy(source: Path, target: Path, tensor: str, factor: float) -> None:
    """The lab's model with one BF16 tensor multiplied by FACTOR: the same files, names,
    shapes and dtypes (structurally valid), other numbers."""
    import numpy as np
    from safetensors import safe_open

    from ascendctl_lab.model import to_bf16_bytes

    shutil.copytree(source, target)
    index = json.loads((target / "model.safetensors.index.json").read_text())
    path = target / index["weight_map"][tensor]
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    start, end = header[tensor]["data_offsets"]
    begin = 8 + size
    bits = np.frombuffer(raw[begin + start:begin + end], dtype="<u2").astype(np.uint32) << 16
    scaled = to_bf16_bytes(bits.view(np.float32) * np.float32(factor))
    assert len(scaled) == end - start
    path.write_bytes(raw[:begin + start] + scaled + raw[begin + end:])
    with safe_open(str(path), framework="numpy") as handle:   # still a valid checkpoint
        assert tensor in handle.keys()


def test_altered_weights_fail_the_agreement_gate(state):
    assert "release_b" in state, "needs the previous test's release B"
    altered = state["dir"] / "model-scaled"
    scaled_copy(state["lab"].model_dir, altered, SCALED_TENSOR, SCALE)
    inv_c = write_inventory(state, "c", quality=state["agree"], serving={"max_num_seqs": 4},
                            model_source=altered)
    junit = state["dir"] / "scaled.xml"
    # it starts and answers (readiness cannot tell); the deploy's gate refuses it
    result = ascendctl("deploy", "-i", str(inv_c), "--yes", "--json", "--junit", str(junit))
    assert result.returncode == 6, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    release_c = report["outcome"]["release_id"]
    assert release_c not in (state["release_a"], state["release_b"])
    summary = report["summary"]
    assert (f"quality gate (agree_with_previous) failed on node0 for release {release_c}: "
            "agreement ") in summary, summary
    assert f"< min_agreement 0.9 with release {state['release_b']}" in summary, summary
    cases = [c for suite in JUnitXml.fromfile(str(junit)) for c in suite]
    assert any(not c.is_passed for c in cases)
    # the group is back on B, which serves
    data = json.loads(ascendctl("history", "-i", str(inv_c), "--json", timeout=120).stdout)
    assert set(data["current"].values()) == {state["release_b"]}
    releases = {r["id"]: r for r in data["releases"]}
    assert releases[release_c]["status"] == "failed"
    agreement = releases[release_c]["quality"]["agreement"]
    print(f"\n{SCALED_TENSOR} x {SCALE:g}: agreement {agreement['mean']:.4f}, "
          f"{agreement['exact_rate']:.0%} identical over {agreement['compared']} prompts")
    assert agreement["mean"] < 0.9
    state["release_c"] = release_c


def test_history_shows_each_releases_latest_gate_and_the_key_stays_on_the_node(state):
    assert "release_c" in state, "needs the previous tests' releases"
    result = ascendctl("history", "-i", str(state["inv_a"]), "--json", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    releases = {r["id"]: r for r in json.loads(result.stdout)["releases"]}
    # A's latest gate run was the prompt set with a wrong expected answer
    assert releases[state["release_a"]]["quality"]["status"] == "fail"
    assert releases[state["release_a"]]["quality"]["mode"] == "prompts"
    assert releases[state["release_b"]]["quality"]["status"] == "pass"
    assert releases[state["release_b"]]["quality"]["agreement"]["mean"] >= 0.9
    assert releases[state["release_c"]]["quality"]["status"] == "fail"
    assert "prompts" not in releases[state["release_c"]]["quality"]     # summaries only
    table = ascendctl("history", "-i", str(state["inv_a"]), timeout=120)
    assert re.search(r"fail: agreement 0\.\d\d", table.stdout), table.stdout
    events = [json.loads(line) for line in node_sh(state, f"cat {ROOT}/history.jsonl")
              .splitlines()]
    assert [e["status"] for e in events if e.get("event") == "quality"][-1] == "fail"
    leaks = node_sh(state, f"grep -rl {API_KEY} {ROOT}/quality {ROOT}/history.jsonl || true")
    assert leaks.strip() == ""
    assert API_KEY not in result.stdout + table.stdout
