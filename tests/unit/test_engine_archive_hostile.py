"""Hostile engine archives and wheelhouses (issue 19): each is refused by the real CLI
(`ascendctl engine identity` in the CLI runner, once as a child process of its own; an
inventory pointing at it) with exit 2 and one line
`error: <file>: engine.archive|engine.wheelhouse: message`, no traceback, quickly; a FIFO,
a device, a socket or a directory never hangs it. The
archives are written here by tarfile/gzip (bombs as concatenated gzip members of one
compressed block, so building them stays cheap); valid layouts of docker and podman still
give the image ID, the sha256 of their config.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import socket
import subprocess
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import yaml

from ascendctl.engine.archive import image_config
from tests.unit.cli_runner import Run
from tests.unit.hostile_files import BUDGET, Cost, cli, refused
from tests.unit.test_engine_identity import make_archive
from tests.unit.test_plan_inventories import example_data

GIB2 = 2 << 30
Member = tuple[tarfile.TarInfo, bytes]


# -- writing archives -------------------------------------------------------------------

def info(name: str, data: bytes = b"", **attrs) -> Member:
    member = tarfile.TarInfo(name)
    member.size, member.mode = len(data), 0o644
    for key, value in attrs.items():
        setattr(member, key, value)
    return member, data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    return info(name, type=kind, linkname=target)


def tar_bytes(members: Iterable[Member]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out.getvalue()


def layer_tar() -> bytes:
    return tar_bytes([info("usr", type=tarfile.DIRTYPE, mode=0o755),
                      info("usr/engine", b"#!/bin/sh\necho engine\n", mode=0o755)])


LAYER = layer_tar()
DIFF_ID = "sha256:" + hashlib.sha256(LAYER).hexdigest()
CONFIG = image_config([DIFF_ID], labels={"tag": "1"})


def docker_members(*, config: bytes = CONFIG, manifest: object = None,
                   config_name: str | None = None, layers: list[str] | None = None,
                   extra: Iterable[Member] = ()) -> list[Member]:
    """The members of a `docker save` archive (podman's layout: <hex>.tar, <hex>.json)."""
    config_name = config_name or hashlib.sha256(config).hexdigest() + ".json"
    layer_name = DIFF_ID[7:] + ".tar"
    if manifest is None:
        manifest = [{"Config": config_name, "RepoTags": ["localhost/x:1"],
                     "Layers": layers if layers is not None else [layer_name]}]
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return [info(layer_name, LAYER), info(config_name, config), *extra,
            info("manifest.json", body)]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def gzip_parts(path: Path, parts: Iterable[bytes | tuple[bytes, int]]) -> Path:
    """A gzip file of concatenated members (gzip readers join them): bytes are one
    member, (block, n) one compressed block written n times - gigabytes from kilobytes."""
    with open(path, "wb") as out:
        for part in parts:
            block, times = part if isinstance(part, tuple) else (part, 1)
            packed = gzip.compress(block, compresslevel=9)
            for _ in range(times):
                out.write(packed)
    return path


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    member = tarfile.TarInfo(name)
    member.size, member.type = size, kind
    return member.tobuf(format=tarfile.USTAR_FORMAT)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def end_blocks() -> bytes:
    return bytes(1024)


# -- the inventory and the CLI ----------------------------------------------------------

def inventory(tmp_path: Path, engine: dict) -> Path:
    data = example_data()
    variables = data["all"]["vars"]
    variables["engine"] = engine
    variables["serving"].pop("engine", None)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def container_inventory(tmp_path: Path, archive: Path) -> Path:
    return inventory(tmp_path, {"kind": "container", "runtime": "podman",
                                "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1",
                                "archive": str(archive)})


def venv_inventory(tmp_path: Path, wheelhouse: Path) -> Path:
    return inventory(tmp_path, {"kind": "venv", "wheelhouse": str(wheelhouse)})


def identity(inv: Path, tmp_path: Path, *, process: bool = False
             ) -> tuple[subprocess.CompletedProcess | Run, Cost]:
    return cli(tmp_path, "engine", "identity", "-i", inv, "--json", process=process)


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    """What the CLI costs on a valid archive (start-up, imports): the bound's base."""
    tmp = tmp_path_factory.mktemp("startup")
    archive, _ = make_archive(tmp)
    inv = container_inventory(tmp, archive)
    costs = []
    for _ in range(2):
        done, cost = identity(inv, tmp)
        assert done.returncode == 0, done.stderr
        costs.append(cost)
    return Cost(min(c.wall for c in costs), min(c.cpu for c in costs))


def assert_refused(tmp_path: Path, inv: Path, file: Path, field: str, phrase: str,
                   startup: Cost) -> str:
    return refused(identity(inv, tmp_path), startup, prefix=f"error: {file}: {field}: ",
                   phrase=phrase)


# -- hostile archives -------------------------------------------------------------------

def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def config_case(config: bytes) -> Callable[[Path], Path]:
    return lambda tmp: write(tmp / "img.tar", tar_bytes(docker_members(config=config)))


def manifest_case(manifest: object) -> Callable[[Path], Path]:
    return lambda tmp: write(tmp / "img.tar", tar_bytes(docker_members(manifest=manifest)))


def config_with(**changes) -> bytes:
    config = json.loads(CONFIG)
    config.update(changes)
    return json.dumps(config).encode()


def manifest_bomb_gz(tmp: Path) -> Path:
    """A 2 MB gzip whose manifest.json is 2 GiB of JSON whitespace (then `[]`)."""
    layers = b"".join(member.tobuf(format=tarfile.PAX_FORMAT) + padded(data)
                      for member, data in docker_members()[:2])
    return gzip_parts(tmp / "bomb.tar.gz", [
        layers, header("manifest.json", GIB2 + 2), (b" " * (1 << 20), GIB2 >> 20),
        padded(b"[]") + end_blocks()])


def manifest_bomb_plain(tmp: Path) -> Path:
    """The same uncompressed: a sparse 2 GiB file, cheap on disk."""
    path = tmp / "bomb.tar"
    with open(path, "wb") as out:
        out.write(header("manifest.json", GIB2 + 2))
        out.truncate(512 + GIB2 + 512 + 1024)
    return path


def config_bomb_gz(tmp: Path) -> Path:
    """The config blob (named later by the manifest) 2 GiB of JSON whitespace."""
    block = 1 << 20
    return gzip_parts(tmp / "cbomb.tar.gz", [
        header("blobs/sha256/" + "a" * 64, GIB2), b"{" + b" " * (block - 1),
        (b" " * block, (GIB2 >> 20) - 1)])


def pax_bomb_gz(tmp: Path) -> Path:
    """An extended (pax) header of 2 GiB: tarfile would read it whole before any member."""
    return gzip_parts(tmp / "pax.tar.gz", [
        header("././@PaxHeader", GIB2, tarfile.XHDTYPE), (b"0" * (1 << 20), GIB2 >> 20)])


def pax_chain(tmp: Path) -> Path:
    """10 000 extended headers in a row: tarfile parses the chain by recursion."""
    record = b"20 comment=hello!!!\n"
    block = header("././@PaxHeader", len(record), tarfile.XHDTYPE) + padded(record)
    return write(tmp / "chain.tar", block * 10_000 + tar_bytes(docker_members()))


def pax_sparse(tmp: Path) -> Path:
    """GNU sparse 1.0 in a pax header: tarfile reads the sparse map without a bound."""
    body = padded(b"99999999999\n" + b"1\n" * 4000)
    member = tarfile.TarInfo("GNUSparseFile.0/manifest.json")
    member.size = len(body)
    member.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                          "GNU.sparse.name": "manifest.json", "GNU.sparse.realsize": "10"}
    return write(tmp / "sparse.tar", member.tobuf(format=tarfile.PAX_FORMAT) + body
                 + end_blocks())


def gnu_sparse(tmp: Path) -> Path:
    return write(tmp / "gsparse.tar", header("manifest.json", 0, tarfile.GNUTYPE_SPARSE)
                 + end_blocks())


def many_members(tmp: Path) -> Path:
    return write(tmp / "many.tar", tar_bytes(
        [info(f"f{i}") for i in range(20_000)] + docker_members()))


def corrupt_gzip(tmp: Path) -> Path:
    """64 bytes flipped right after the gzip header: the first deflate block."""
    data = bytearray(gzip.compress(tar_bytes(docker_members())))
    for offset in range(10, 74):
        data[offset] ^= 0x55
    return write(tmp / "corrupt.tar.gz", bytes(data))


def truncated_gzip(tmp: Path) -> Path:
    data = gzip.compress(tar_bytes(docker_members()))
    return write(tmp / "cut.tar.gz", data[: len(data) // 2])


def oci_layout(tmp: Path) -> Path:
    digest = hashlib.sha256(CONFIG).hexdigest()
    return write(tmp / "oci.tar", tar_bytes([
        info("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
        info("index.json", b'{"schemaVersion": 2, "manifests": []}'),
        info(f"blobs/sha256/{digest}", CONFIG), info(f"blobs/sha256/{DIFF_ID[7:]}", LAYER)]))


def duplicated_manifest(tmp: Path) -> Path:
    members = docker_members()
    return write(tmp / "dup.tar", tar_bytes(members + [info("./manifest.json", b"[]")]))


def fifo(tmp: Path) -> Path:
    path = tmp / "img.tar"
    os.mkfifo(path)
    return path


def unix_socket(tmp: Path) -> Path:
    path = tmp / "img.tar"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()                                # the socket file stays
    return path


def directory(tmp: Path) -> Path:
    path = tmp / "img.tar"
    path.mkdir()
    return path


def non_utf8_manifest(tmp: Path) -> Path:
    return write(tmp / "img.tar", tar_bytes(docker_members(manifest=b'[{"Config": "\xff"}]')))


LAYER_NAME = DIFF_ID[7:] + ".tar"
CONFIG_NAME = hashlib.sha256(CONFIG).hexdigest() + ".json"

ARCHIVES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "deep manifest.json": (manifest_case(deep(100_000)), "manifest.json is nested 100000"),
    "deep config": (config_case(deep(50_000)), "is nested 50000 levels deep"),
    "config is a list": (config_case(b"[1, 2]"), "must be a JSON object, not a list"),
    "config is a string": (config_case(b'"x"'), "is not a JSON object"),
    "config is a number": (config_case(b"42"), "is not a JSON object"),
    "config without rootfs": (config_case(b"{}"), "rootfs.diff_ids must be a list"),
    "diff_ids a string": (config_case(config_with(rootfs={"diff_ids": "sha256:1"})),
                          "rootfs.diff_ids must be a list"),
    "rootfs a list": (config_case(config_with(rootfs=[DIFF_ID])),
                      "rootfs.diff_ids must be a list"),
    "config.config a string": (config_case(config_with(config="x")),
                               "config must be an object, not a string"),
    "labels a list": (config_case(config_with(config={"Labels": ["a"]})),
                      "config.Labels must map names to strings"),
    "label value a number": (config_case(config_with(config={"Labels": {"a": 1}})),
                             "config.Labels must map names to strings"),
    "config 5 MiB": (config_case(b"{" + b" " * (5 << 20) + b"}"), "(limit 4194304)"),
    "config not UTF-8": (config_case(b'{"a": "\xff"}'), "is not UTF-8"),
    "manifest an object": (manifest_case({"Config": "x"}), "exactly one image"),
    "manifest two images": (manifest_case([{}, {}]), "exactly one image (manifest.json lists 2)"),
    "manifest entry a number": (manifest_case([1]), "the image entry must be an object"),
    "Config a number": (manifest_case([{"Config": 5, "Layers": []}]),
                        "Config must be a member name"),
    "Layers a string": (manifest_case([{"Config": CONFIG_NAME, "Layers": "x"}]),
                        "Layers must be a list"),
    "RepoTags a number": (manifest_case([{"Config": CONFIG_NAME, "Layers": [LAYER_NAME],
                                          "RepoTags": 5}]), "RepoTags must be a list"),
    "manifest not UTF-8": (non_utf8_manifest, "manifest.json is not UTF-8"),
    "manifest not JSON": (manifest_case(b"[{]"), "manifest.json is not valid"),
    "config absent": (manifest_case([{"Config": "nope.json", "Layers": [LAYER_NAME]}]),
                      "lacks config 'nope.json' named in manifest.json"),
    "layer absent": (manifest_case([{"Config": CONFIG_NAME, "Layers": ["nope.tar"]}]),
                     "lacks layer 'nope.tar'"),
    "Config climbs out": (manifest_case([{"Config": "../x.json", "Layers": []}]),
                          "escapes the archive"),
    "2 GiB manifest.json (gzip)": (manifest_bomb_gz, "member manifest.json is 2147483650 bytes"),
    "2 GiB manifest.json (tar)": (manifest_bomb_plain, "member manifest.json is 2147483650"),
    "2 GiB config blob (gzip)": (config_bomb_gz, "looks like JSON but is 2147483648 bytes"),
    "2 GiB pax header (gzip)": (pax_bomb_gz, "an extended header of 2147483648 bytes"),
    "10000 chained pax headers": (pax_chain, "more than 8 extended headers in a row"),
    "pax sparse map": (pax_sparse, "GNU sparse"),
    "GNU sparse member": (gnu_sparse, "GNU sparse"),
    "manifest.json a symlink": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        docker_members()[:2] + [link("manifest.json", CONFIG_NAME)])),
        f"manifest.json is a symlink to '{CONFIG_NAME}', not a file"),
    "config a hardlink": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        [info(LAYER_NAME, LAYER), link("c.json", LAYER_NAME, tarfile.LNKTYPE),
         info("manifest.json", json.dumps([{"Config": "c.json", "Layers": [LAYER_NAME]}])
              .encode())])), "config 'c.json' is a hardlink to"),
    "layer a symlink to manifest.json": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        docker_members(layers=["l/layer.tar"], extra=[link("l/layer.tar", "../manifest.json")]))),
        "layer 'l/layer.tar' is a symlink to '../manifest.json', which is not another layer"),
    "symlink out of the archive": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        docker_members(extra=[link("l/layer.tar", "../../etc/passwd")]))),
        "links to '../../etc/passwd', out of the archive"),
    "member ../x": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        docker_members(extra=[info("../x", b"x")]))), "member '../x' escapes the archive"),
    "member /etc/x": (lambda tmp: write(tmp / "img.tar", tar_bytes(
        docker_members(extra=[info("/etc/x", b"x")]))), "member '/etc/x' escapes"),
    "20000 members": (many_members, "has more than 4096 members"),
    "manifest.json twice": (duplicated_manifest, "holds member 'manifest.json' twice"),
    "OCI layout only": (oci_layout, "is an OCI image layout without manifest.json"),
    "empty file": (lambda tmp: write(tmp / "img.tar", b""), "is not a readable tar"),
    "random bytes": (lambda tmp: write(tmp / "img.tar", bytes(range(256)) * 64),
                     "is not a readable tar"),
    "zstd": (lambda tmp: write(tmp / "img.tar.zst", b"\x28\xb5\x2f\xfd" + bytes(600)),
             "zstd-compressed"),
    "corrupt gzip": (corrupt_gzip, "is not a readable tar (truncated or corrupt)"),
    "truncated gzip": (truncated_gzip, "is not a readable tar (truncated or corrupt)"),
    "a FIFO": (fifo, "a FIFO, not a regular file"),
    "a socket": (unix_socket, "a socket, not a regular file"),
    "a directory": (directory, "a directory, not a regular file"),
}


@pytest.mark.parametrize("case", list(ARCHIVES))
def test_hostile_archive_is_refused_by_the_cli(tmp_path, startup, case):
    build, phrase = ARCHIVES[case]
    archive = build(tmp_path)
    assert_refused(tmp_path, container_inventory(tmp_path, archive), archive,
                   "engine.archive", phrase, startup)


def test_the_real_process_refuses_a_2gib_manifest(tmp_path):
    """The same through `python -m ascendctl`: the exit code through the interpreter."""
    archive = manifest_bomb_gz(tmp_path)
    refused(identity(container_inventory(tmp_path, archive), tmp_path, process=True), None,
            prefix=f"error: {archive}: engine.archive: ",
            phrase="member manifest.json is 2147483650 bytes")


def test_a_device_as_archive_is_refused(tmp_path, startup):
    assert_refused(tmp_path, container_inventory(tmp_path, Path("/dev/zero")),
                   Path("/dev/zero"), "engine.archive", "a device, not a regular file", startup)


# -- hostile wheelhouses ----------------------------------------------------------------

def wheelhouse(tmp: Path, *names: str) -> Path:
    root = tmp / "wh"
    root.mkdir()
    for name in names:
        (root / name).write_bytes(b"PK\x05\x06" + bytes(18))       # an empty zip
    return root


def test_a_file_as_wheelhouse_is_refused(tmp_path, startup):
    file = write(tmp_path / "wh", b"not a directory")
    assert_refused(tmp_path, venv_inventory(tmp_path, file), file, "engine.wheelhouse",
                   "is not a directory", startup)


def test_a_fifo_wheel_is_refused(tmp_path, startup):
    root = wheelhouse(tmp_path, "a-1.0-py3-none-any.whl")
    os.mkfifo(root / "b-1.0-py3-none-any.whl")
    assert_refused(tmp_path, venv_inventory(tmp_path, root), root / "b-1.0-py3-none-any.whl",
                   "engine.wheelhouse", "a FIFO, not a regular file: give the wheel", startup)


def test_a_device_wheel_is_refused(tmp_path, startup):
    root = wheelhouse(tmp_path)
    os.mknod(root / "c-1.0-py3-none-any.whl", 0o600 | 0o020000, 0)   # char 0:0
    assert_refused(tmp_path, venv_inventory(tmp_path, root), root / "c-1.0-py3-none-any.whl",
                   "engine.wheelhouse", "a device, not a regular file", startup)


def test_a_wheel_linking_out_of_the_wheelhouse_is_refused(tmp_path, startup):
    outside = write(tmp_path / "secret.whl", b"x")
    root = wheelhouse(tmp_path, "a-1.0-py3-none-any.whl")
    (root / "b-1.0-py3-none-any.whl").symlink_to(outside)
    line = assert_refused(tmp_path, venv_inventory(tmp_path, root), root, "engine.wheelhouse",
                          "wheel 'b-1.0-py3-none-any.whl' is a symlink to", startup)
    assert "outside the wheelhouse" in line


def test_too_many_wheels_are_refused_before_hashing(tmp_path, startup):
    root = wheelhouse(tmp_path, *(f"p{i}-1.0-py3-none-any.whl" for i in range(5000)))
    assert_refused(tmp_path, venv_inventory(tmp_path, root), root, "engine.wheelhouse",
                   "holds more than 4096 wheels", startup)


def test_wheels_are_identified_by_their_bytes_not_opened_as_zips(tmp_path, startup):
    """A corrupt zip or a 64 MiB METADATA changes nothing here: identity hashes the
    files (what is inside is pip's to judge on the node), in linear time."""
    root = wheelhouse(tmp_path)
    (root / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    with zipfile.ZipFile(root / "big-1.0-py3-none-any.whl", "w",
                         compression=zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("big-1.0.dist-info/METADATA", b"Name: big\n" + b" " * (64 << 20))
    inv = venv_inventory(tmp_path, root)
    done, cost = identity(inv, tmp_path)
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert first["kind"] == "venv" and cost.cpu < startup.cpu + BUDGET
    (root / "broken-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 another broken zip")
    again, _ = identity(inv, tmp_path)
    assert json.loads(again.stdout)["wheelhouse_sha256"] != first["wheelhouse_sha256"]


# -- valid layouts still identify -------------------------------------------------------

def expected_id(config: bytes = CONFIG) -> str:
    return "sha256:" + hashlib.sha256(config).hexdigest()


def docker25(tmp: Path) -> Path:
    """docker >= 25: manifest.json beside an OCI layout, members under blobs/sha256/."""
    config_blob, layer_blob = f"blobs/sha256/{expected_id()[7:]}", f"blobs/sha256/{DIFF_ID[7:]}"
    manifest = [{"Config": config_blob, "RepoTags": ["x:1"], "Layers": [layer_blob]}]
    return write(tmp / "d25.tar", tar_bytes([
        info("blobs", type=tarfile.DIRTYPE), info("blobs/sha256", type=tarfile.DIRTYPE),
        info(layer_blob, LAYER), info(config_blob, CONFIG),
        info("index.json", b'{"schemaVersion": 2, "manifests": []}'),
        info("manifest.json", json.dumps(manifest).encode()),
        info("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')]))


def podman_legacy_links(tmp: Path) -> Path:
    """podman: layers as <hex>.tar plus legacy <id>/layer.tar symlinks to them."""
    return write(tmp / "podman.tar", tar_bytes(docker_members(extra=[
        info("abc", type=tarfile.DIRTYPE), link("abc/layer.tar", f"../{LAYER_NAME}"),
        info("abc/VERSION", b"1.0"), info("abc/json", b'{"id": "abc"}'),
        info("repositories", b'{"localhost/x": {"1": "abc"}}')])))


def docker_repeated_layer(tmp: Path) -> Path:
    """docker < 25 writes a repeated layer as a symlink to its first copy."""
    config = image_config([DIFF_ID, DIFF_ID])
    name = expected_id(config)[7:] + ".json"
    manifest = [{"Config": name, "RepoTags": None, "Layers": ["a/layer.tar", "b/layer.tar"]}]
    return write(tmp / "old.tar", tar_bytes([
        info("a", type=tarfile.DIRTYPE), info("a/layer.tar", LAYER),
        info("b", type=tarfile.DIRTYPE), link("b/layer.tar", "../a/layer.tar"),
        info(name, config), info("manifest.json", json.dumps(manifest).encode())]))


def gnu_tar_dot_slash(tmp: Path) -> Path:
    """Repacked with `tar -C dir .`: every name starts with ./"""
    members = docker_members()
    for member, _ in members:
        member.name = "./" + member.name
    return write(tmp / "dot.tar", tar_bytes([info(".", type=tarfile.DIRTYPE), *members]))


VALID = {"docker 25 (OCI beside manifest.json)": (docker25, expected_id()),
         "podman legacy symlinks": (podman_legacy_links, expected_id()),
         "docker < 25 repeated layer": (docker_repeated_layer,
                                        expected_id(image_config([DIFF_ID, DIFF_ID]))),
         "names with ./": (gnu_tar_dot_slash, expected_id())}


@pytest.mark.parametrize("case", list(VALID))
def test_valid_layouts_give_the_config_digest(tmp_path, case):
    build, image_id = VALID[case]
    done, _ = identity(container_inventory(tmp_path, build(tmp_path)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == image_id


def test_written_archives_keep_their_identity_plain_and_gzipped(tmp_path):
    archive, image_id = make_archive(tmp_path)
    with tarfile.open(archive) as tar:
        config = tar.extractfile(json.load(tar.extractfile("manifest.json"))[0]["Config"])
        assert image_id == expected_id(config.read())
    gz = write(tmp_path / "img.tar.gz", gzip.compress(archive.read_bytes(), compresslevel=1))
    for path in (archive, gz):
        done, _ = identity(container_inventory(tmp_path, path), tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"kind": "container", "id": image_id,
                                           "short": "img-" + image_id[7:19],
                                           "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1",
                                           "archive": str(path)}


@pytest.mark.parametrize("case", list(VALID))
def test_valid_layouts_verify_their_layers_plain_and_gzipped(tmp_path, case):
    from ascendctl.engine.identity import read_archive

    build, image_id = VALID[case]
    archive = build(tmp_path)
    gz = write(tmp_path / "img.tar.gz", gzip.compress(archive.read_bytes(), compresslevel=1))
    for path in (archive, gz):
        held = read_archive(path, verify_layers=True)
        assert held.image_id == image_id and set(held.diff_ids) == {DIFF_ID}
