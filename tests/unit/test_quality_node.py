"""The node's half of the quality gate, run here through the same stdin protocol the
controller uses over SSH: which release is gated and which one it replaced, the reference
record, where records are kept, what history reads back, and that the API key stays on
the node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from ascendctl.render.envfile import format_env_file
from ascendctl_runtime.quality_node import parse_answer, request_body
from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin, shipped_with
from tests.conftest import free_port

OLD, NEW = "r-0000000000aa", "r-0000000000bb"
KEY = "sk-" + "quality0123456789"
DIGEST = "ab" * 32


def call(op: str, **kwargs) -> dict:
    done = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                          input=call_stdin("quality_node", {"op": op, "kwargs": kwargs}),
                          capture_output=True, timeout=120)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def make_root(tmp_path, current: str = NEW):
    root = tmp_path / "root"
    for release in (OLD, NEW):
        directory = root / "releases" / release
        (directory / "model").mkdir(parents=True)
        secrets = directory / "secrets.env"
        secrets.write_text(format_env_file([("VLLM_API_KEY", KEY)]))
        os.chmod(secrets, 0o600)
    os.symlink(f"releases/{current}", root / "current")
    events = [{"event": "deployed", "release": OLD, "previous": None},
              {"event": "bench", "release": OLD},
              {"event": "deployed", "release": NEW, "previous": OLD}]
    (root / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return root


def record(release: str, stamp: str, status: str, digest: str = DIGEST) -> dict:
    return {"release": release, "stamp": stamp, "status": status, "mode": "agree",
            "prompt_set": {"digest": digest, "source": "builtin", "count": 1},
            "counts": {"prompts": 1, "failed": 0}, "agreement": None,
            "prompts": [{"id": "p1", "text": f"{release} {stamp}", "token_ids": [1, 2, 3]}]}


def store(root, release: str, stamp: str, status: str, digest: str = DIGEST) -> dict:
    return call("store", root=str(root), release=release, stamp=stamp,
                record=record(release, stamp, status, digest),
                event={"event": "quality", "release": release, "status": status})


def test_the_nodecall_ships_the_module_with_what_it_imports():
    assert [path for path, _ in shipped_with("quality_node")] == [
        "ascendctl_runtime/__init__.py", "ascendctl_runtime/layout.py",
        "ascendctl_runtime/nodeutil.py", "ascendctl_runtime/quality_node.py"]


def test_locate_names_the_release_it_replaced_and_that_ones_latest_passing_record(tmp_path):
    root = make_root(tmp_path)
    where = call("locate", root=str(root), digest=DIGEST)
    assert (where["current"], where["release"], where["previous"]) == (NEW, NEW, OLD)
    assert where["api_key"] is True and KEY not in json.dumps(where)
    assert where["reference"] is None                 # OLD left no gate record
    store(root, OLD, "20261201T100000Z-0001", "pass")
    store(root, OLD, "20261201T110000Z-0002", "pass", digest="cd" * 32)   # other prompts
    store(root, OLD, "20261201T120000Z-0003", "fail")                      # not a reference
    ref = call("locate", root=str(root), digest=DIGEST)["reference"]
    assert ref == {"release": OLD, "stamp": "20261201T100000Z-0001",
                   "outputs": {"p1": {"text": f"{OLD} 20261201T100000Z-0001",
                                      "token_ids": [1, 2, 3]}}}
    # the caller may name the previous release (a rolling deploy knows it)
    assert call("locate", root=str(root), digest=DIGEST, previous=NEW)["reference"] is None
    # the first release replaced nothing
    first = call("locate", root=str(root), digest=DIGEST, release=OLD)
    assert first["release"] == OLD and first["previous"] is None and first["current"] == NEW
    assert call("locate", root=str(tmp_path / "empty"), digest=DIGEST) == \
        {"current": None, "release": None}


def test_a_rollback_event_makes_the_release_it_left_the_previous_one(tmp_path):
    root = make_root(tmp_path, current=OLD)
    with open(root / "history.jsonl", "a") as handle:
        handle.write(json.dumps({"event": "rollback", "release": OLD, "previous": NEW}) + "\n")
    assert call("locate", root=str(root), digest=DIGEST)["previous"] == NEW


def test_store_keeps_records_beside_the_release_logs_an_event_and_prunes(tmp_path):
    root = make_root(tmp_path)
    before = sorted(p.relative_to(root) for p in (root / "releases").rglob("*"))
    stamp = "20261201T100000Z-00aa"
    stored = store(root, NEW, stamp, "pass")
    assert stored["path"] == f"{root}/quality/{NEW}/{stamp}.json"
    assert json.loads((root / "quality" / NEW / f"{stamp}.json").read_text())["status"] == "pass"
    assert sorted(p.relative_to(root) for p in (root / "releases").rglob("*")) == before
    last = json.loads((root / "history.jsonl").read_text().splitlines()[-1])
    assert last == {"event": "quality", "release": NEW, "status": "pass",
                    "file": stored["path"]}
    # the record of a release that was pruned goes with it
    store(root, OLD, "20261201T100000Z-00bb", "pass")
    shutil.rmtree(root / "releases" / OLD)
    assert store(root, NEW, "20261201T110000Z-00cc", "fail")["pruned"] == [OLD]
    assert not (root / "quality" / OLD).exists()


def test_list_gives_each_releases_latest_record_without_its_outputs(tmp_path):
    root = make_root(tmp_path)
    store(root, NEW, "20261201T100000Z-0001", "pass")
    store(root, NEW, "20261201T110000Z-0002", "fail")
    store(root, OLD, "20261201T090000Z-0003", "pass")
    latest = call("list", root=str(root))["latest"]
    assert {k: v["status"] for k, v in latest.items()} == {NEW: "fail", OLD: "pass"}
    assert latest[NEW]["stamp"] == "20261201T110000Z-0002" and "prompts" not in latest[NEW]


def test_bad_ids_and_stamps_are_refused(tmp_path):
    root = make_root(tmp_path)
    assert "bad release id" in call("locate", root=str(root), digest=DIGEST,
                                    release="../etc")["error"]
    assert "bad stamp" in call("store", root=str(root), release=NEW, stamp="../x",
                               record={}, event={})["error"]
    assert "bad prompt set digest" in call("locate", root=str(root), digest="x")["error"]


def test_generate_asks_only_the_engine_serving_the_release_and_reports_each_failure(tmp_path):
    root = make_root(tmp_path)
    prompts = [{"id": "a", "prompt": "x", "max_tokens": 4},
               {"id": "b", "messages": [{"role": "user", "content": "y"}], "max_tokens": 4}]
    wrong = call("generate", root=str(root), release=OLD, port=free_port(), model="m",
                 prompts=prompts, concurrency=2, timeout_s=5)
    assert wrong["error"] == f"ValueError: this node serves {NEW}, not {OLD}"
    # nothing listens on the port: each prompt gets its own error, the call still answers
    done = call("generate", root=str(root), release=NEW, port=free_port(), model="m",
                prompts=prompts, concurrency=2, timeout_s=5)
    assert [o["id"] for o in done["outputs"]] == ["a", "b"]
    assert done["outputs"][0]["error"].startswith("/v1/completions failed: ")
    assert done["outputs"][1]["error"].startswith("/v1/chat/completions failed: ")
    assert KEY not in json.dumps(done)


def test_the_request_is_greedy_and_asks_for_token_ids():
    path, body = request_body({"id": "a", "prompt": "Hi", "max_tokens": 7}, "tiny")
    assert path == "/v1/completions"
    assert body == {"model": "tiny", "prompt": "Hi", "max_tokens": 7, "temperature": 0,
                    "n": 1, "stream": False, "return_token_ids": True}
    path, body = request_body({"id": "a", "messages": [{"role": "user", "content": "Hi"}],
                               "max_tokens": 7}, "tiny")
    assert path == "/v1/chat/completions" and body["messages"][0]["content"] == "Hi"
    assert parse_answer({"choices": [{"text": " there", "token_ids": [5, 6],
                                      "finish_reason": "length"}]}) == \
        {"text": " there", "token_ids": [5, 6], "finish_reason": "length"}
    assert parse_answer({"choices": [{"message": {"content": "yo"}, "finish_reason": "stop",
                                      "token_ids": None}]})["token_ids"] is None
    assert "no choices" in parse_answer({"object": "error"})["error"]
