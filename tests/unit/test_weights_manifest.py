"""Manifest: sizes and sha256 match, relative paths, fingerprint, cache, escapes refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.weights.cache import HashCache
from ascendctl.weights.manifest import build_manifest, list_model_files, load_manifest
from ascendctl.weights.nodehelper import fingerprint_file


def make_dir(root: Path) -> dict[str, bytes]:
    files = {
        "config.json": b'{"num_hidden_layers": 2}',
        "model-00001-of-00002.safetensors": os.urandom(300_000),
        "model-00002-of-00002.safetensors": os.urandom(70_000),
        "sub/tokenizer.json": b"{}",
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / ".cache").mkdir()
    (root / ".cache" / "junk").write_bytes(b"x")
    (root / ".gitattributes").write_text("*.safetensors filter=lfs")
    return files


def test_manifest_sizes_hashes_relative_paths(tmp_path):
    files = make_dir(tmp_path)
    manifest = build_manifest(tmp_path)
    assert [e.path for e in manifest.files] == sorted(files)
    for entry in manifest.files:
        assert entry.size == len(files[entry.path])
        assert entry.sha256 == hashlib.sha256(files[entry.path]).hexdigest()
    text = manifest.to_json()
    assert str(tmp_path) not in text          # directory-independent
    assert json.loads(text)["total_bytes"] == sum(len(d) for d in files.values())


def test_manifest_parallel_equals_serial(tmp_path):
    make_dir(tmp_path)
    assert build_manifest(tmp_path, workers=1) == build_manifest(tmp_path, workers=8)


def test_fingerprint_sees_size_and_sampled_bytes_only(tmp_path):
    path = tmp_path / "big.bin"
    data = bytearray(os.urandom(1_000_000))
    path.write_bytes(data)
    before = fingerprint_file(path)
    assert before.startswith("fp1:")
    data[0] ^= 1                                   # first block is always sampled
    path.write_bytes(data)
    assert fingerprint_file(path) != before
    data[0] ^= 1
    path.write_bytes(data + b"\0")                 # size is part of it
    assert fingerprint_file(path) != before
    path.write_bytes(data)
    assert fingerprint_file(path) == before


def test_cache_second_run_reads_nothing_and_sees_changes(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    files = make_dir(model)
    cache_path = tmp_path / "cache.json"
    first = build_manifest(model, cache=HashCache(cache_path))
    second_cache = HashCache(cache_path)
    second = build_manifest(model, cache=second_cache)
    assert second == first and second_cache.hits == len(files)
    # a changed file (new size and mtime) is hashed again; the others still come from cache
    target = model / "model-00002-of-00002.safetensors"
    target.write_bytes(b"changed")
    third_cache = HashCache(cache_path)
    third = build_manifest(model, cache=third_cache)
    assert third_cache.hits == len(files) - 1
    assert third.by_path()["model-00002-of-00002.safetensors"].sha256 == \
        hashlib.sha256(b"changed").hexdigest()


def test_cache_entry_with_same_size_but_new_mtime_is_rehashed(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "a.bin").write_bytes(b"aaaa")
    cache_path = tmp_path / "cache.json"
    build_manifest(model, cache=HashCache(cache_path))
    (model / "a.bin").write_bytes(b"bbbb")
    st = os.stat(model / "a.bin")
    os.utime(model / "a.bin", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    result = build_manifest(model, cache=HashCache(cache_path))
    assert result.files[0].sha256 == hashlib.sha256(b"bbbb").hexdigest()


def test_symlink_inside_is_followed_outside_is_refused(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "real.bin").write_bytes(b"x")
    (model / "alias.bin").symlink_to("real.bin")
    assert list_model_files(model) == ["alias.bin", "real.bin"]
    (tmp_path / "secret").write_text("s")
    (model / "evil.bin").symlink_to(tmp_path / "secret")
    with pytest.raises(InputError, match="outside the model directory"):
        build_manifest(model)


def test_symlinked_directory_outside_is_refused(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("x")
    (model / "shards").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="outside the model directory"):
        list_model_files(model)


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "a/../../b", ""])
def test_loaded_manifest_refuses_escaping_entries(tmp_path, bad):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"format": "ascendctl-weights-manifest/1", "entries": [
        {"path": "ok.bin", "size": 1, "sha256": "0" * 64, "fingerprint": "fp1:0"},
        {"path": bad, "size": 1, "sha256": "0" * 64, "fingerprint": "fp1:0"}]}, indent=1))
    with pytest.raises(InputError) as err:
        load_manifest(path)
    assert str(path) in str(err.value) and "entries[1].path" in str(err.value)


def test_manifest_round_trip(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    make_dir(model)
    manifest = build_manifest(model)
    (tmp_path / "out.json").write_text(manifest.to_json())
    assert load_manifest(tmp_path / "out.json") == manifest


def test_cli_manifest_json_and_second_run_from_cache(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    files = make_dir(model)
    env = {**os.environ, "ASCENDCTL_HASH_CACHE": str(tmp_path / "cache.json")}
    argv = [sys.executable, "-m", "ascendctl", "weights", "manifest", str(model)]
    first = subprocess.run(argv + ["--json"], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert {e["path"] for e in data["entries"]} == set(files)
    second = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert f"({len(files)} from cache)" in second.stdout
