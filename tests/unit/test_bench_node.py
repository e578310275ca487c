"""The head node's half of `bench`, run here through the same stdin protocol the
controller uses over SSH: where the serving release is, where results are kept (not in
the release directory: that is the release's content), history events, pruning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin
from ascendctl.render.envfile import format_env_file

RELEASE = "r-0123456789ab"


def call(op: str, **kwargs) -> dict:
    done = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                          input=call_stdin("bench_node", {"op": op, "kwargs": kwargs}),
                          capture_output=True, timeout=60)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def make_root(tmp_path, key: str | None = "sk-" + "abcdef0123456789"):
    root = tmp_path / "root"
    model = root / "releases" / RELEASE / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    if key:
        secrets = root / "releases" / RELEASE / "secrets.env"
        secrets.write_text(format_env_file([("VLLM_API_KEY", key)]))
        os.chmod(secrets, 0o600)
    os.symlink(f"releases/{RELEASE}", root / "current")
    return root


def test_locate_finds_the_serving_release_and_the_executable(tmp_path):
    root = make_root(tmp_path)
    where = call("locate", root=str(root), bench=sys.executable)
    assert where["release"] == RELEASE
    assert where["model_dir"] == f"{root}/releases/{RELEASE}/model" and where["model_ok"]
    assert where["bench_ok"] and where["api_key"] is True
    assert "sk-" not in json.dumps(where)          # it says there is a key, not which
    missing = call("locate", root=str(root), bench=str(tmp_path / "no-vllm"))
    assert missing["bench_ok"] is False
    assert call("locate", root=str(tmp_path / "empty"), bench="vllm") == {"release": None}


def test_store_keeps_results_beside_the_release_and_logs_a_history_event(tmp_path):
    root = make_root(tmp_path)
    before = sorted(p.relative_to(root) for p in (root / "releases").rglob("*"))
    stamp = "20261129T103356Z-b9eb"
    event = {"event": "bench", "release": RELEASE, "verdict": "pass"}
    stored = call("store", root=str(root), release=RELEASE, stamp=stamp,
                  record={"stamp": stamp, "verdict": {"status": "pass"}}, event=event)
    assert stored["path"] == f"{root}/bench/{RELEASE}/{stamp}.json"
    # the release directory is untouched (its files decide whether a deploy changes)
    assert sorted(p.relative_to(root) for p in (root / "releases").rglob("*")) == before
    history = [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]
    assert history == [{**event, "file": stored["path"]}]
    later = "20261129T113000Z-0001"
    call("store", root=str(root), release=RELEASE, stamp=later,
         record={"stamp": later}, event=event)
    (root / "bench" / RELEASE / f"{later}.vllm.json").write_text("{}")
    records = call("list", root=str(root))["records"]
    assert [r["stamp"] for r in records[RELEASE]] == [stamp, later]


def test_results_of_pruned_releases_go_with_them(tmp_path):
    root = make_root(tmp_path)
    gone = root / "bench" / "r-gone00000000"
    gone.mkdir(parents=True)
    (gone / "20260101T000000Z.json").write_text("{}")
    stored = call("store", root=str(root), release=RELEASE, stamp="20261129T103356Z",
                  record={}, event={"event": "bench"})
    assert stored["pruned"] == ["r-gone00000000"] and not gone.exists()


def test_bad_values_are_refused_on_the_node(tmp_path):
    root = make_root(tmp_path)
    answer = call("store", root=str(root), release="../../etc", stamp="20261129T103356Z",
                  record={}, event={})
    assert "bad release id" in answer["error"]
    answer = call("store", root=str(root), release=RELEASE, stamp="x; rm -rf /",
                  record={}, event={})
    assert "bad stamp" in answer["error"]
