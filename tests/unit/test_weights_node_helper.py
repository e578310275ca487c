"""The node-side helper, run locally: store, relay stream, resume, verification on arrival."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from ascendctl.weights.nodehelper import fingerprint_file, helper_path


def run_helper(root: Path, *args: str, stdin: bytes = b"") -> tuple[int, list[dict]]:
    proc = subprocess.run([sys.executable, str(helper_path()), "--root", str(root),
                           "--name", "n0", *args], input=stdin, capture_output=True)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line]
    return proc.returncode, events


def record(data: bytes, offset: int = 0, targets=("n0",), sha: str | None = None) -> bytes:
    sha = sha or hashlib.sha256(data).hexdigest()
    header = {"t": "obj", "sha": sha, "size": len(data), "offset": offset,
              "targets": list(targets), "payload": True}
    return json.dumps(header).encode() + b"\n" + data[offset:]


END = b'{"t":"end"}\n'


def store_object(root: Path, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    return root / "store" / "sha256" / sha[:2] / sha


def test_relay_writes_verified_read_only_object(tmp_path):
    data = os.urandom(3_000_000)
    code, events = run_helper(tmp_path, "relay", stdin=record(data) + END)
    assert code == 0
    path = store_object(tmp_path, data)
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o777 == 0o444
    verdict = [e for e in events if e["ev"] == "obj"]
    assert verdict == [{"ev": "obj", "node": "n0", "sha": hashlib.sha256(data).hexdigest(),
                        "written": len(data), "ok": True}]
    done = [e for e in events if e["ev"] == "done"][0]
    assert done["received"] == len(data) and done["failures"] == 0


def test_interrupted_stream_resumes_from_partial(tmp_path):
    data = os.urandom(2_000_000)
    cut = 1_234_567
    stream = record(data)
    code, events = run_helper(tmp_path, "relay", stdin=stream[:len(stream) - len(data) + cut])
    assert code == 1 and any(e["ev"] == "error" for e in events)
    sha = hashlib.sha256(data).hexdigest()
    partial = tmp_path / "store" / "partial" / f"{sha}.part"
    assert partial.stat().st_size == cut
    _, state = run_helper(tmp_path, "state", stdin=json.dumps(
        {"objects": [{"sha256": sha, "size": len(data)}]}).encode())
    assert state[0]["objects"][sha] == {"status": "absent", "reason": "not in the store",
                                        "have": cut}
    code, events = run_helper(tmp_path, "relay", stdin=record(data, offset=cut) + END)
    assert code == 0
    verdict = [e for e in events if e["ev"] == "obj"][0]
    assert verdict["ok"] and verdict["written"] == len(data) - cut
    assert store_object(tmp_path, data).read_bytes() == data


def test_stream_from_earlier_offset_skips_what_is_there(tmp_path):
    data = os.urandom(500_000)
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "store" / "partial").mkdir(parents=True)
    (tmp_path / "store" / "partial" / f"{sha}.part").write_bytes(data[:300_000])
    code, events = run_helper(tmp_path, "relay", stdin=record(data, offset=100_000) + END)
    assert code == 0
    assert [e for e in events if e["ev"] == "obj"][0]["written"] == 200_000


def test_corrupt_stream_fails_naming_the_object(tmp_path):
    data = os.urandom(100_000)
    wrong = hashlib.sha256(b"something else").hexdigest()
    code, events = run_helper(tmp_path, "relay", stdin=record(data, sha=wrong) + END)
    assert code == 1
    verdict = [e for e in events if e["ev"] == "obj"][0]
    assert not verdict["ok"] and wrong in verdict["msg"]
    assert not (tmp_path / "store" / "sha256" / wrong[:2] / wrong).exists()
    assert not (tmp_path / "store" / "partial" / f"{wrong}.part").exists()


def test_not_a_target_only_forwards(tmp_path):
    data = os.urandom(10_000)
    code, _ = run_helper(tmp_path, "relay", stdin=record(data, targets=("n1",)) + END)
    assert code == 0
    assert not store_object(tmp_path, data).exists()


def test_state_and_verify_catch_a_flipped_byte(tmp_path):
    data = bytearray(os.urandom(400_000))
    run_helper(tmp_path, "relay", stdin=record(bytes(data)) + END)
    path = store_object(tmp_path, bytes(data))
    sha = path.name
    request = {"objects": [{"sha256": sha, "size": len(data),
                            "fingerprint": fingerprint_file(path)}]}
    _, [ok] = run_helper(tmp_path, "verify", stdin=json.dumps(request).encode())
    assert ok["objects"][sha]["status"] == "ok"
    os.chmod(path, 0o644)
    with open(path, "r+b") as handle:       # a byte no fingerprint sample covers
        handle.seek(123_457)
        byte = handle.read(1)
        handle.seek(123_457)
        handle.write(bytes([byte[0] ^ 0xFF]))
    _, [fast] = run_helper(tmp_path, "verify", stdin=json.dumps(request).encode())
    assert fast["objects"][sha]["status"] == "bad"     # mtime moved: hashed in full
    _, [full] = run_helper(tmp_path, "verify", stdin=json.dumps(dict(request, full=True)).encode())
    assert full["objects"][sha]["status"] == "bad" and "sha256" in full["objects"][sha]["reason"]
    _, [state] = run_helper(tmp_path, "state", stdin=json.dumps(dict(request, repair=True)).encode())
    assert state["objects"][sha]["status"] == "bad"
    assert not path.exists()                           # removed so push sends it again


def test_materialise_links_into_store_and_writes_index(tmp_path):
    data = os.urandom(1000)
    run_helper(tmp_path, "relay", stdin=record(data) + END)
    sha = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "releases" / "r1" / "model"
    request = {"dest": str(dest), "files": [{"path": "a/w.safetensors", "sha256": sha}],
               "write": {"model.safetensors.index.json": '{"weight_map": {}}'}}
    code, [event] = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert code == 0 and event["ok"]
    assert os.readlink(dest / "a" / "w.safetensors") == str(store_object(tmp_path, data))
    assert (dest / "a" / "w.safetensors").read_bytes() == data
    assert json.loads((dest / "model.safetensors.index.json").read_text()) == {"weight_map": {}}
    request["files"].append({"path": "b.safetensors", "sha256": "ab" * 32})
    code, [event] = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert code == 1 and event["missing"] == ["b.safetensors"]
    assert (dest / "a" / "w.safetensors").exists()      # the old directory is untouched
    request["files"] = [{"path": "../escape", "sha256": sha}]
    code, _ = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert code == 2


def test_a_second_writer_of_the_same_object_is_refused(tmp_path):
    import fcntl

    data = os.urandom(50_000)
    sha = hashlib.sha256(data).hexdigest()
    partial = tmp_path / "store" / "partial" / f"{sha}.part"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:10_000])
    with open(partial, "r+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)       # another push is appending
        code, events = run_helper(tmp_path, "relay", stdin=record(data) + END)
    assert code == 1
    verdict = [e for e in events if e["ev"] == "obj"][0]
    assert not verdict["ok"] and "another push" in verdict["msg"]
    assert partial.read_bytes() == data[:10_000]        # untouched


def test_inline_bootstrap_runs_the_helper_without_installing_it(tmp_path):
    from ascendctl.weights.nodehelper import helper_source
    from ascendctl.weights.remote import BOOTSTRAP

    data = os.urandom(5000)
    run_helper(tmp_path, "relay", stdin=record(data) + END)
    sha = hashlib.sha256(data).hexdigest()
    script = helper_source()
    request = json.dumps({"objects": [{"sha256": sha, "size": len(data)}]}).encode()
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(len(script)), "--root",
                           str(tmp_path), "--name", "n0", "verify"],
                          input=script + request, capture_output=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["objects"][sha]["status"] == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]    # nothing installed


def test_materialise_twice_reports_no_change(tmp_path):
    data = os.urandom(1000)
    run_helper(tmp_path, "relay", stdin=record(data) + END)
    request = {"dest": str(tmp_path / "rel" / "model"),
               "files": [{"path": "w.safetensors", "sha256": hashlib.sha256(data).hexdigest()}],
               "write": {"model.safetensors.index.json": "{}\n"}}
    _, [first] = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    inode = (tmp_path / "rel" / "model").stat().st_ino
    _, [second] = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert first["changed"] and not second["changed"]
    assert (tmp_path / "rel" / "model").stat().st_ino == inode
    request["write"]["model.safetensors.index.json"] = '{"weight_map": {}}\n'
    _, [third] = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert third["changed"]


def test_materialise_never_writes_through_a_store_link(tmp_path):
    """A written file on the path of a store link (or below a linked directory) would
    overwrite a read-only object (root may write 0444 files): refused, object intact."""
    data = os.urandom(1000)
    run_helper(tmp_path, "relay", stdin=record(data) + END)
    sha = hashlib.sha256(data).hexdigest()
    obj = store_object(tmp_path, data)
    for write in ({"w.safetensors": "overwritten"}, {"./w.safetensors": "overwritten"}):
        request = {"dest": str(tmp_path / "rel" / "model"),
                   "files": [{"path": "w.safetensors", "sha256": sha}], "write": write}
        code, _ = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
        assert code == 2
        assert obj.read_bytes() == data and oct(obj.stat().st_mode & 0o777) == "0o444"
    request = {"dest": str(tmp_path / "rel" / "model"),
               "files": [{"path": "d", "sha256": sha}], "write": {"d/x": "under a link"}}
    code, _ = run_helper(tmp_path, "materialise", stdin=json.dumps(request).encode())
    assert code != 0 and obj.read_bytes() == data
