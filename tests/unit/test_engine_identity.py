"""Engine identity from a docker-archive written here (no runtime), and from wheelhouses."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from ascendctl.engine.archive import image_config, write_docker_archive, write_layer_tar
from ascendctl.engine.identity import (
    EngineError, normalise_image_id, read_archive, read_wheelhouse,
)
from ascendctl.engine.kinds.container import identity_from_nodes
from ascendctl.engine.kinds.venv import venv_identity
from ascendctl.errors import InputError


def make_archive(tmp_path: Path, label: str = "1", name: str = "img.tar") -> tuple[Path, str]:
    layer_dir = tmp_path / "layer"
    if not layer_dir.exists():
        (layer_dir / "usr/bin").mkdir(parents=True)
        (layer_dir / "usr/bin/engine").write_bytes(os.urandom(300_000))
        (layer_dir / "usr/bin/link").symlink_to("engine")
        (layer_dir / "etc").mkdir()
        (layer_dir / "etc/version.cfg").write_text("runtime_running_version=[8.5.1.1.220:8.5.1]\n")
    layer = write_layer_tar(layer_dir, tmp_path / "layers" / "l.tar")
    config = image_config([layer.diff_id], labels={"tag": label}, env=["PATH=/usr/bin"])
    archive = tmp_path / name
    image_id = write_docker_archive(archive, [layer], config, [f"localhost/x:{label}"])
    return archive, image_id


def test_image_id_is_the_config_digest_read_without_loading(tmp_path):
    archive, image_id = make_archive(tmp_path)
    held = read_archive(archive, verify_layers=True)
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        config = tar.extractfile(manifest[0]["Config"]).read()
    assert held.image_id == image_id == "sha256:" + hashlib.sha256(config).hexdigest()
    assert held.repo_tags == ("localhost/x:1",) and held.labels == {"tag": "1"}
    assert len(held.layers) == 1 == len(held.diff_ids)


def test_labels_change_the_id_and_not_the_layers(tmp_path):
    one = read_archive(make_archive(tmp_path, "1", "a.tar")[0])
    two = read_archive(make_archive(tmp_path, "2", "b.tar")[0])
    assert one.image_id != two.image_id and one.diff_ids == two.diff_ids


def test_layer_tars_are_deterministic(tmp_path):
    make_archive(tmp_path)
    first = write_layer_tar(tmp_path / "layer", tmp_path / "again.tar")
    second = write_layer_tar(tmp_path / "layer", tmp_path / "again2.tar")
    assert first.diff_id == second.diff_id


def test_whiteouts_become_markers(tmp_path):
    layer = tmp_path / "wl"
    (layer / "opt").mkdir(parents=True)
    os.mknod(layer / "opt/gone", 0o600 | 0o020000, 0)        # overlay whiteout: char 0:0
    written = write_layer_tar(layer, tmp_path / "w.tar")
    with tarfile.open(written.path) as tar:
        assert "opt/.wh.gone" in tar.getnames()


@pytest.mark.parametrize("cut", [100, 4096, 200_000])
def test_truncated_archive_is_refused(tmp_path, cut):
    archive, _ = make_archive(tmp_path)
    size = archive.stat().st_size
    with open(archive, "r+b") as handle:
        handle.truncate(size - 10240 - cut)     # past the writer's end padding
    with pytest.raises(InputError) as err:
        read_archive(archive)
    assert "engine.archive" in str(err.value) and err.value.exit_code == 2


def test_corrupt_layer_is_found_by_verification(tmp_path):
    archive, _ = make_archive(tmp_path)
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("layer.tar"))
    with open(archive, "r+b") as handle:
        handle.seek(member.offset_data + 5000)
        handle.write(b"\xff" * 16)
    assert read_archive(archive).image_id          # structure intact
    with pytest.raises(InputError) as err:
        read_archive(archive, verify_layers=True)
    assert "corrupt" in str(err.value)


def test_gzip_archive_is_read_in_one_pass(tmp_path):
    archive, image_id = make_archive(tmp_path)
    compressed = tmp_path / "img.tar.gz"
    with open(archive, "rb") as src, gzip.open(compressed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_archive(compressed, verify_layers=True).image_id == image_id


def test_zstd_and_garbage_are_refused(tmp_path):
    zstd = tmp_path / "x.tar.zst"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 600)
    with pytest.raises(InputError, match="zstd"):
        read_archive(zstd)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(InputError):
        read_archive(junk)
    with pytest.raises(InputError, match="not found"):
        read_archive(tmp_path / "missing.tar")


def test_two_images_in_one_archive_are_refused(tmp_path):
    archive, _ = make_archive(tmp_path)
    out = tmp_path / "two.tar"
    with tarfile.open(archive) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            if member.name == "manifest.json":
                entry = json.load(data)
                body = json.dumps(entry * 2).encode()
                member.size = len(body)
                import io
                dst.addfile(member, io.BytesIO(body))
            else:
                dst.addfile(member, data)
    with pytest.raises(InputError, match="exactly one image"):
        read_archive(out)


def test_node_ids_must_agree_and_exist():
    one = "a" * 64
    ident = identity_from_nodes("img", {"node0": one, "node1": "sha256:" + one})
    assert ident.id == "sha256:" + one and ident.short == "img-" + one[:12]
    with pytest.raises(EngineError, match="not on node1"):
        identity_from_nodes("img", {"node0": one, "node1": None})
    with pytest.raises(EngineError, match="differs between nodes"):
        identity_from_nodes("img", {"node0": one, "node1": "b" * 64})
    with pytest.raises(ValueError):
        normalise_image_id("not-an-id")


def test_wheelhouse_identity_follows_content_python_and_packages(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    (wh / "b-2.0-py3-none-any.whl").write_bytes(b"b")
    (wh / "README").write_text("not a wheel")
    first = read_wheelhouse(wh)
    assert [f.path for f in first.files] == ["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]
    base = venv_identity(first, "/usr/bin/python3", [])
    assert base == venv_identity(read_wheelhouse(wh), "/usr/bin/python3", [])
    assert base != venv_identity(first, "/usr/bin/python3.11", [])
    assert base != venv_identity(first, "/usr/bin/python3", ["a"])
    (wh / "b-2.0-py3-none-any.whl").write_bytes(b"B")
    assert read_wheelhouse(wh).digest != first.digest
    with pytest.raises(InputError, match="no wheels"):
        read_wheelhouse(tmp_path / "layer" if (tmp_path / "layer").exists() else tmp_path)


def test_skipped_paths_leave_out_everything_under_them_and_nothing_else(tmp_path):
    layer = tmp_path / "sl"
    for path in ("site/triton/_C/libtriton.so", "site/triton-3.9.0.dist-info/METADATA",
                 "site/tritonclient/x.py", "site/torch/test/t.py", "site/torch/lib/l.so"):
        (layer / path).parent.mkdir(parents=True, exist_ok=True)
        (layer / path).write_text(path)
    written = write_layer_tar(layer, tmp_path / "s.tar",
                              skip=["site/triton", "/site/torch/test/"])
    with tarfile.open(written.path) as tar:
        names = set(tar.getnames())
    assert not any(n == "site/triton" or n.startswith("site/triton/") or
                   n.startswith("site/torch/test") for n in names), names
    assert {"site/triton-3.9.0.dist-info/METADATA", "site/tritonclient/x.py",
            "site/torch/lib/l.so"} <= names
    assert written.diff_id != write_layer_tar(layer, tmp_path / "all.tar").diff_id
