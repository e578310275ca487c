"""Release bookkeeping on a node (runtime/ascendctl_runtime/release_ops.py) on a temp root.

The unit operations (systemctl) are exercised on the lab; these are the file-system
parts: stage, switch, prune, history and the lock.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import pytest

from ascendctl.deploy.bundle import runtime_module
from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin

ops = runtime_module("release_ops")


def files(**contents: str):
    return [{"path": path.replace("__", "/"), "b64": base64.b64encode(text.encode()).decode(),
             "mode": 0o600 if "secret" in path else 0o644, "secret": "secret" in path}
            for path, text in contents.items()]


def stage(root, rid, check=False, **contents):
    return ops.op_stage(str(root), rid, files(**contents), {"created": rid, "by": "test"},
                        check=check, diff=True)


def test_stage_writes_atomically_with_modes_and_is_idempotent(tmp_path):
    first = stage(tmp_path, "r-1", **{"engine.env": "A=1\n", "secrets.env": "K=v\n",
                                      "units__x.service": "[Unit]\n"})
    rel = tmp_path / "releases" / "r-1"
    assert first["changed"] and not first["exists"]
    assert (rel / "units" / "x.service").read_text() == "[Unit]\n"
    assert oct((rel / "secrets.env").stat().st_mode & 0o777) == "0o600"
    assert (rel / ".status").read_text() == "staged\n"
    again = stage(tmp_path, "r-1", **{"engine.env": "A=1\n", "secrets.env": "K=v\n",
                                      "units__x.service": "[Unit]\n"})
    assert again["identical"] and not again["changed"] and again["files"] == []
    assert not [p for p in (tmp_path / "releases").iterdir() if p.name.startswith(".")]


def test_check_mode_diffs_against_current_and_writes_nothing(tmp_path):
    stage(tmp_path, "r-1", **{"engine.env": "A=1\n", "secrets.env": "K=old\n"})
    ops.op_switch(str(tmp_path), "r-1", check=False)
    answer = stage(tmp_path, "r-2", check=True, **{"engine.env": "A=2\n", "secrets.env": "K=new\n"})
    assert answer["changed"] and answer["current"] == "r-1"
    by_path = {f["path"]: f for f in answer["files"]}
    assert "-A=1" in by_path["engine.env"]["diff"] and "+A=2" in by_path["engine.env"]["diff"]
    assert by_path["secrets.env"]["diff"] == "(secret: content not shown)"
    assert "new" not in json.dumps(by_path["secrets.env"])
    assert not (tmp_path / "releases" / "r-2").exists()


def test_switch_is_atomic_and_marks_statuses(tmp_path):
    stage(tmp_path, "r-1", **{"a": "1"})
    stage(tmp_path, "r-2", **{"a": "2"})
    assert ops.op_switch(str(tmp_path), "r-1", check=False) == {"changed": True, "previous": None}
    assert ops.current_release(str(tmp_path)) == "r-1"
    assert ops.op_switch(str(tmp_path), "r-2", check=False)["previous"] == "r-1"
    assert os.readlink(tmp_path / "current") == "releases/r-2"
    assert (tmp_path / "releases" / "r-1" / ".status").read_text().strip() == "superseded"
    assert (tmp_path / "releases" / "r-2" / ".status").read_text().strip() == "active"
    assert ops.op_switch(str(tmp_path), "r-2", check=False)["changed"] is False
    with pytest.raises(ValueError, match="not on this node"):
        ops.op_switch(str(tmp_path), "r-9", check=False)


def test_prune_keeps_newest_current_and_protected(tmp_path):
    for i in range(1, 7):
        stage(tmp_path, f"r-{i}", **{"a": str(i)})
    ops.op_switch(str(tmp_path), "r-2", check=False)
    dry = ops.op_prune(str(tmp_path), 3, ["r-1"], check=True)
    assert sorted(dry["removed"]) == ["r-3"] and len(os.listdir(tmp_path / "releases")) == 6
    done = ops.op_prune(str(tmp_path), 3, ["r-1"], check=False)
    assert sorted(os.listdir(tmp_path / "releases")) == ["r-1", "r-2", "r-4", "r-5", "r-6"]
    assert done["removed"] == ["r-3"]


def test_prune_drops_failed_releases_before_ones_that_served(tmp_path):
    for i in range(1, 5):
        stage(tmp_path, f"r-{i}", **{"a": str(i)})
    ops.op_mark(str(tmp_path), "r-3", "failed")
    ops.op_mark(str(tmp_path), "r-4", "failed")
    ops.op_switch(str(tmp_path), "r-2", check=False)
    assert sorted(ops.op_prune(str(tmp_path), 2, [], check=False)["removed"]) == ["r-3", "r-4"]
    assert sorted(os.listdir(tmp_path / "releases")) == ["r-1", "r-2"]


def test_history_appends_json_lines_and_state_reads_them(tmp_path):
    ops.op_history(str(tmp_path), {"event": "deployed", "release": "r-1"})
    ops.op_history(str(tmp_path), {"event": "failed", "release": "r-2"})
    assert [e["event"] for e in ops.read_history(str(tmp_path), 10)] == ["deployed", "failed"]
    assert len(ops.read_history(str(tmp_path), 1)) == 1


def test_lock_is_exclusive_names_holder_and_detects_stale(tmp_path):
    root = str(tmp_path)
    me = {"holder": "alice@jump", "token": "t1", "since": "now"}
    other = {"holder": "bob@jump", "token": "t2"}
    assert ops.op_lock(root, "acquire", me, 900) == {"acquired": True, "broke": None}
    refused = ops.op_lock(root, "acquire", other, 900)
    assert refused["acquired"] is False and refused["holder"]["holder"] == "alice@jump"
    assert "token" not in refused["holder"]
    assert refused["stale"] is False
    old = time.time() - 2000
    os.utime(tmp_path / "deploy.lock" / "heartbeat", (old, old))
    assert ops.op_lock(root, "acquire", other, 900)["stale"] is True
    assert ops.op_lock(root, "heartbeat", me, 900)["held"] is True
    assert ops.op_lock(root, "acquire", other, 900)["stale"] is False
    lost = ops.op_lock(root, "release", other, 900)
    assert lost["released"] is False and lost["holder"]["holder"] == "alice@jump"
    assert ops.op_lock(root, "heartbeat", other, 900)["held"] is False
    assert (tmp_path / "deploy.lock").exists()


def test_force_unlock_breaks_only_a_stale_lock_unless_told_any(tmp_path):
    root = str(tmp_path)
    me = {"holder": "alice@jump", "token": "t1", "since": "now"}
    other = {"holder": "bob@jump", "token": "t2"}
    ops.op_lock(root, "acquire", me, 900)
    fresh = ops.op_lock(root, "acquire", other, 900, force="stale")
    assert fresh["acquired"] is False and fresh["refused_force"] is True
    assert ops.op_lock(root, "heartbeat", me, 900)["held"] is True      # still alice's
    old = time.time() - 2000
    os.utime(tmp_path / "deploy.lock" / "heartbeat", (old, old))
    broken = ops.op_lock(root, "acquire", other, 900, force="stale")
    assert broken["acquired"] is True and broken["broke"]["holder"] == "alice@jump"
    beat = ops.op_lock(root, "heartbeat", me, 900)          # alice learns she lost it
    assert beat["held"] is False and beat["holder"]["holder"] == "bob@jump"
    assert ops.op_lock(root, "release", me, 900)["released"] is False
    taken = ops.op_lock(root, "acquire", me, 900, force="any")       # double consent
    assert taken["acquired"] is True and taken["broke"]["holder"] == "bob@jump"
    events = ops.read_history(root, 5)
    assert [(e["event"], e["holder"], e["by"], e["stale"]) for e in events] == [
        ("lock-broken", "alice@jump", "bob@jump", True),
        ("lock-broken", "bob@jump", "alice@jump", False)]
    assert ops.op_lock(root, "release", me, 900)["released"] is True
    assert not (tmp_path / "deploy.lock").exists()
    with pytest.raises(ValueError, match="force level"):
        ops.op_lock(root, "acquire", me, 900, force="yes")


def test_a_lock_without_its_holder_file_still_goes_stale(tmp_path):
    (tmp_path / "deploy.lock").mkdir()
    old = time.time() - 2000
    os.utime(tmp_path / "deploy.lock", (old, old))
    refused = ops.op_lock(str(tmp_path), "acquire", {"holder": "b", "token": "t"}, 900)
    assert refused["holder"]["holder"] == "(unreadable)" and refused["stale"] is True
    taken = ops.op_lock(str(tmp_path), "acquire", {"holder": "b", "token": "t"}, 900,
                        force="stale")
    assert taken["acquired"] is True


def test_bootstrap_runs_the_shipped_source_from_stdin(tmp_path):
    payload = {"op": "history", "root": str(tmp_path),
               "kwargs": {"event": {"event": "x; $(touch /tmp/never)"}}}
    result = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                            input=call_stdin("release_ops", payload),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"changed": True}
    assert ops.read_history(str(tmp_path), 5)[0]["event"] == "x; $(touch /tmp/never)"
    bad = {"op": "switch", "root": str(tmp_path),
           "kwargs": {"release_id": "r-x", "check": False}}
    result = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                            input=call_stdin("release_ops", bad),
                            capture_output=True, timeout=60)
    assert result.returncode == 1 and "not on this node" in json.loads(result.stdout)["error"]


def test_runtime_bundle_imports_with_the_standard_library_only(tmp_path):
    from ascendctl.deploy.bundle import runtime_bundle

    for rendered in runtime_bundle():
        path = tmp_path / rendered.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rendered.content)
    modules = sorted(p.stem for p in (tmp_path / "runtime" / "ascendctl_runtime").glob("*.py")
                     if p.stem != "__init__")
    code = "import importlib\n" + "".join(
        f"importlib.import_module('ascendctl_runtime.{m}')\n" for m in modules)
    # -S: no site-packages; -I: ignore the environment and the current directory
    result = subprocess.run([sys.executable, "-S", "-I", "-c",
                             f"import sys; sys.path.insert(0, {str(tmp_path / 'runtime')!r})\n"
                             + code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert {"launcher", "exporter", "watchdog", "probe", "release_ops"} <= set(modules)


def test_model_links_are_not_part_of_the_release_content(tmp_path):
    stage(tmp_path, "r-1", **{"engine.env": "A=1\n"})
    model = tmp_path / "releases" / "r-1" / "model"
    model.mkdir()
    (model / "model.safetensors.index.json").write_text("{}")
    cache = tmp_path / "releases" / "r-1" / "__pycache__"   # the runtime ran: bytecode
    cache.mkdir()
    (cache / "launcher.cpython-311.pyc").write_bytes(b"\0")
    again = stage(tmp_path, "r-1", **{"engine.env": "A=1\n"})
    assert again["identical"] and not again["changed"]
    (tmp_path / "releases" / "r-1" / "engine.env").write_text("tampered\n")
    repaired = stage(tmp_path, "r-1", **{"engine.env": "A=1\n"})
    assert repaired["changed"]
    assert (tmp_path / "releases" / "r-1" / "engine.env").read_text() == "A=1\n"
    assert (model / "model.safetensors.index.json").read_text() == "{}"


def test_exchange_swaps_two_directories_in_one_step(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "which").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "which").write_text("b")
    assert ops.exchange_paths(str(tmp_path / "a"), str(tmp_path / "b")) is True
    assert (tmp_path / "a" / "which").read_text() == "b"
    assert (tmp_path / "b" / "which").read_text() == "a"


def test_replacing_a_release_never_leaves_a_moment_without_it(tmp_path):
    import threading

    stage(tmp_path, "r-1", **{"engine.env": "A=1\n", **{f"f{i}": "x" * 4096 for i in range(40)}})
    model = tmp_path / "releases" / "r-1" / "model"
    model.mkdir()
    (model / "w.safetensors").symlink_to("/store/abc")
    directory = tmp_path / "releases" / "r-1"
    missing: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not (directory / "engine.env").exists():
                missing.append("engine.env")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for round_ in range(15):
            (directory / "engine.env").write_text(f"tampered {round_}\n")
            assert stage(tmp_path, "r-1", **{"engine.env": "A=1\n",
                                             **{f"f{i}": "x" * 4096 for i in range(40)}})["changed"]
    finally:
        done.set()
        watcher.join()
    assert missing == []
    assert os.readlink(model / "w.safetensors") == "/store/abc"     # model links kept
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["r-1"]


def test_unset_current_and_state_reports_leftovers(tmp_path):
    stage(tmp_path, "r-1", **{"a": "1"})
    ops.op_switch(str(tmp_path), "r-1", check=False)
    (tmp_path / "releases" / ".staging-r-2-99").mkdir()
    state = ops.op_state(str(tmp_path), [])
    assert state["leftovers"] == [".staging-r-2-99"] and state["current"] == "r-1"
    assert [r["id"] for r in state["releases"]] == ["r-1"]
    assert ops.op_unset_current(str(tmp_path)) == {"changed": True, "previous": "r-1"}
    assert ops.current_release(str(tmp_path)) is None
    assert ops.op_unset_current(str(tmp_path))["changed"] is False
