"""The toolkit's version files read from an image archive on this machine (preflight's
view of an image no node holds yet): plain and gzip archives alike, the top layer first,
through `latest -> 8.5.1`; hostile layers are an InputError, and preflight reports them
as a failed check instead of a traceback."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from ascendctl.engine.archive import image_config, write_docker_archive, write_layer_tar
from ascendctl.engine.archive_files import cached_archive_files, read_archive_files
from ascendctl.engine.identity import read_archive
from ascendctl.engine.preflight import engine_expectation
from ascendctl.errors import InputError
from ascendctl.facts.engine import CANN_FILES
from ascendctl.load import load_inventory
from tests.unit.test_engine_archive_hostile import (
    container_inventory, docker_members, info, link, tar_bytes, write,
)

TOOLKIT = "usr/local/Ascend/ascend-toolkit"
INSTALL_INFO = "package_name=Ascend-cann-toolkit\nversion=8.5.1\ninnerversion=V100R001C25\n"


def toolkit_archive(tmp_path: Path) -> tuple[Path, str]:
    """Two layers: the toolkit with `latest -> 8.5.1`, then a layer replacing version.cfg."""
    base, top = tmp_path / "base", tmp_path / "top"
    arch = base / TOOLKIT / "8.5.1" / "x86_64-linux"
    arch.mkdir(parents=True)
    (arch / "ascend_toolkit_install.info").write_text(INSTALL_INFO)
    (base / TOOLKIT / "8.5.1" / "version.cfg").write_text("runtime_running_version=[old]\n")
    (base / TOOLKIT / "latest").symlink_to("8.5.1")
    (top / TOOLKIT / "8.5.1").mkdir(parents=True)
    (top / TOOLKIT / "8.5.1" / "version.cfg").write_text("runtime_running_version=[new]\n")
    layers = [write_layer_tar(base, tmp_path / "l1.tar"), write_layer_tar(top, tmp_path / "l2.tar")]
    archive = tmp_path / "img.tar"
    image_id = write_docker_archive(archive, layers, image_config([x.diff_id for x in layers]),
                                    ["localhost/t:1"])
    return archive, image_id


EXPECTED = {f"/{TOOLKIT}/latest/version.cfg": "runtime_running_version=[new]\n",
            f"/{TOOLKIT}/latest/x86_64-linux/ascend_toolkit_install.info": INSTALL_INFO}


def test_toolkit_files_come_from_the_top_layer_through_latest(tmp_path):
    archive, _ = toolkit_archive(tmp_path)
    assert read_archive_files(archive, CANN_FILES) == EXPECTED


def test_a_gzip_archive_gives_the_same_files(tmp_path):
    archive, image_id = toolkit_archive(tmp_path)
    gz = write(tmp_path / "img.tar.gz", gzip.compress(archive.read_bytes(), compresslevel=1))
    assert read_archive_files(gz, CANN_FILES) == EXPECTED
    assert read_archive(gz, verify_layers=True).image_id == image_id


def test_the_cache_survives_a_corrupt_cache_file(tmp_path):
    archive, _ = toolkit_archive(tmp_path)
    cache = tmp_path / "cache.json"
    cache.write_text("[" * 100_000)
    assert cached_archive_files(archive, CANN_FILES, cache=cache) == EXPECTED
    entries = json.loads(cache.read_text())
    assert list(entries.values()) == [EXPECTED]
    cache.write_text(json.dumps({"not json key": EXPECTED, **entries}))
    assert cached_archive_files(archive, CANN_FILES, cache=cache) == EXPECTED


def layer_archive(tmp_path: Path, layer: bytes) -> Path:
    import hashlib

    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = image_config([diff_id])
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [], "Layers": ["l.tar"]}]
    return write(tmp_path / "img.tar", tar_bytes([
        info("l.tar", layer), info(config_name, config),
        info("manifest.json", json.dumps(manifest).encode())]))


@pytest.mark.parametrize("layer, phrase", [
    (tar_bytes([info("../../usr/local/Ascend/x", b"x")]), "escapes the archive"),
    (tar_bytes([link(f"{TOOLKIT}/latest/{i}-linux", "/etc") for i in range(2000)]),
     "more than 1024 symlinks"),
    (tar_bytes([info(f"{TOOLKIT}/{i}/version.cfg", b"v") for i in range(300)]),
     "more than 256 files"),
    (b"not a tar at all" * 64, "is not a readable tar"),
])
def test_hostile_layers_are_refused_naming_the_layer(tmp_path, layer, phrase):
    archive = layer_archive(tmp_path, layer)
    with pytest.raises(InputError) as caught:
        read_archive_files(archive, CANN_FILES)
    assert phrase in str(caught.value) and "layer 'l.tar'" in str(caught.value)
    assert caught.value.file == str(archive) and caught.value.field == "engine.archive"


def test_a_layer_of_many_members_is_read_in_linear_time(tmp_path):
    """20 000 headers (10 MB): read one by one and forgotten, never all at once."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(20_000):
            tar.addfile(tarfile.TarInfo(f"usr/lib/f{i}"))
    archive = layer_archive(tmp_path, out.getvalue())
    started = time.process_time()
    assert read_archive_files(archive, CANN_FILES) == {}
    assert time.process_time() - started < 10


def test_preflight_reports_an_unreadable_archive_as_a_check(tmp_path):
    archive, image_id = toolkit_archive(tmp_path)
    gz = write(tmp_path / "img.tar.gz", gzip.compress(archive.read_bytes(), compresslevel=1))
    good = engine_expectation(load_inventory(container_inventory(tmp_path, gz),
                                             check_files=False))
    assert good.archive_error is None and good.archive_image_id == image_id
    assert good.archive_cann.version == "8.5.1"
    bad = write(tmp_path / "bad.tar", tar_bytes(docker_members(config=b"[]")))
    refused = engine_expectation(load_inventory(container_inventory(tmp_path, bad),
                                                check_files=False))
    assert "must be a JSON object, not a list" in refused.archive_error


def test_mangled_archives_fail_only_as_input_errors(tmp_path):
    """Bytes overwritten, runs replaced, tails cut, in plain and gzip archives (seeded):
    every read either succeeds or is an InputError naming the archive."""
    import random

    archive, _ = toolkit_archive(tmp_path)
    bases = [archive.read_bytes(), tar_bytes(docker_members())]
    bases += [gzip.compress(data, compresslevel=1) for data in bases]
    rng = random.Random(19)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(300):
        data = bytearray(rng.choice(bases))
        cut = rng.randrange(len(data))
        if rng.random() < 0.3:
            del data[cut:]
        else:
            data[cut:cut + rng.randint(1, 600)] = rng.randbytes(rng.randint(1, 600))
        mangled = write(tmp_path / "mangled.tar", bytes(data))
        for read in (lambda: read_archive(mangled, verify_layers=True),
                     lambda: read_archive_files(mangled, CANN_FILES)):
            try:
                read()
                outcomes["ok"] += 1
            except InputError as err:
                assert err.file == str(mangled) and err.field == "engine.archive"
                outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["ok"] > 0, outcomes
