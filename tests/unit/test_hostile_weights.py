"""The files of a model directory (issue 19): through `ascendctl weights manifest DIR` and
`ascendctl weights plan -i INV` (a pipeline layout, so safetensors headers, the index and
config.json are read), a FIFO, device, broken link, giant, deep JSON, lying header or
entry of the wrong shape is refused with exit 2 and one line naming the file, quickly.
A manifest (no command reads one) and the hash cache are checked through their readers."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.weights.cache import HashCache
from ascendctl.weights.index import INDEX_NAME, MAX_INDEX_BYTES, read_index
from ascendctl.weights.manifest import MAX_MANIFEST_BYTES, build_manifest, load_manifest
from ascendctl.weights.safetensors_file import MAX_HEADER, read_header
from tests.unit.hostile_files import (
    Cost, cli, deep_json, fifo, good_inventory, hang_guard, measure_startup, refused, sparse,
)
from tests.unit.test_weights_checkpoints import qwen3_names, write_checkpoint

SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    return measure_startup(tmp_path_factory.mktemp("startup"))


def model_dir(tmp_path: Path) -> Path:
    """A 4-layer Qwen3 checkpoint in two shards, with an index and config.json."""
    model = tmp_path / "model"
    write_checkpoint(model, qwen3_names(4), 2, config={"num_hidden_layers": 4})
    return model


def manifest_cli(tmp_path: Path, model: Path, process: bool = False, **env: str):
    return cli(tmp_path, "weights", "manifest", model, env=env, process=process)


def plan_cli(tmp_path: Path, model: Path):
    def edit(_data, variables):
        variables["model"]["source"] = str(model)

    return cli(tmp_path, "weights", "plan", "-i", good_inventory(tmp_path, edit))


def safetensors(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def tensor_header(**entry) -> bytes:
    info = {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4], **entry}
    return json.dumps({"t": info}).encode()


# -- weights manifest DIR: the listing, the index -----------------------------------------

LISTING = {
    "a FIFO": (lambda m: fifo(m / "extra.bin"), "'extra.bin' is a FIFO, not a regular file"),
    "a broken link": (lambda m: (m / "gone.bin").symlink_to(m / "nowhere"),
                      "'gone.bin' is a broken symlink, not a regular file"),
    "a newline in a name": (lambda m: fifo(m / "we\nird"),
                            "'we\\nird' contains control characters"),
}


@pytest.mark.parametrize("case", LISTING, ids=list(LISTING))
def test_a_non_regular_entry_in_the_model_directory_is_refused(tmp_path, startup, case):
    model = model_dir(tmp_path)
    make, phrase = LISTING[case]
    make(model)
    refused(manifest_cli(tmp_path, model), startup, prefix=f"error: {model}: ", phrase=phrase)


def test_dot_entries_are_skipped_even_when_not_regular(tmp_path, startup):
    model = model_dir(tmp_path)
    fifo(model / ".lock")
    done, _ = manifest_cli(tmp_path, model)
    assert done.returncode == 0, done.stderr
    assert ".lock" not in done.stdout and SHARD in done.stdout


def write_index(model: Path, content: object) -> None:
    (model / INDEX_NAME).write_text(content if isinstance(content, str)
                                    else json.dumps(content))


INDEX = {   # case: (make, what follows the file name in the message, phrase)
    "a FIFO": (lambda m: fifo(m / INDEX_NAME), " ", "a FIFO, not a regular file"),
    "too large": (lambda m: sparse(m / INDEX_NAME, MAX_INDEX_BYTES + 1), " ",
                  "too large for a weights index"),
    "nested deep": (lambda m: write_index(m, deep_json(50_000)), " ",
                    "nested 50001 levels deep"),
    "no weight map": (lambda m: write_index(m, '{"weight_map": [1]}'), " weight_map: ",
                      "needs a `weight_map` object"),
    "naming a FIFO": (lambda m: fifo(m / "pipe.safetensors") and write_index(
        m, {"weight_map": {"t": "pipe.safetensors"}}), "1: weight_map.t: ",
        "names 'pipe.safetensors', which is a FIFO, not a regular file"),
    "a file name that is a list": (lambda m: write_index(
        m, {"weight_map": {"x" * 5000: [SHARD]}}), "1: weight_map['xxxx",
        "file name must be a string"),
}


@pytest.mark.parametrize("case", INDEX, ids=list(INDEX))
def test_a_hostile_index_is_refused(tmp_path, startup, case):
    model = model_dir(tmp_path)
    (model / INDEX_NAME).unlink()
    make, where, phrase = INDEX[case]
    make(model)
    line = refused(manifest_cli(tmp_path, model), startup,
                   prefix=f"error: {model / INDEX_NAME}:{where}", phrase=phrase)
    assert "x" * 200 not in line


def test_the_real_process_refuses_a_deep_index(tmp_path):
    """The same through `python -m ascendctl`: the exit code through the interpreter."""
    model = model_dir(tmp_path)
    write_index(model, deep_json(50_000))
    refused(manifest_cli(tmp_path, model, process=True), None,
            prefix=f"error: {model / INDEX_NAME}: ", phrase="nested 50001 levels deep")


def test_a_fifo_hash_cache_is_refused_and_a_corrupt_one_ignored(tmp_path, startup):
    model = model_dir(tmp_path)
    cache = fifo(tmp_path / "hash-cache.json")
    refused(manifest_cli(tmp_path, model, ASCENDCTL_HASH_CACHE=str(cache)), startup,
            prefix=f"error: {cache}: ", phrase="a FIFO, not a regular file: the weights hash")
    cache.unlink()
    expected = build_manifest(model).to_json()
    for corrupt in (deep_json(100_000), "{{{", json.dumps({"version": 1, "entries": {
            str((model / SHARD).resolve()): [1], "x": {"size": "big"}}})):
        cache.write_text(corrupt)
        done, _ = cli(tmp_path, "weights", "manifest", model, "--json",
                      env={"ASCENDCTL_HASH_CACHE": str(cache)})
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected             # everything hashed again, correctly
        assert json.loads(cache.read_text())["version"] == 1      # and the cache rewritten


def test_a_large_index_is_read_in_linear_time(tmp_path):
    """100 000 tensors over 100 shards (9 MB): took 545 s when every entry's line number
    was looked up (quadratic), about 1 s since."""
    shards = [f"model-{i:05d}-of-00100.safetensors" for i in range(100)]
    for name in shards:
        (tmp_path / name).write_bytes(b"")
    weight_map = {f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight":
                  shards[i % 100] for i in range(100_000)}
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}, indent=2))
    started = time.process_time()
    assert len(read_index(tmp_path)["weight_map"]) == 100_000
    assert time.process_time() - started < 20


# -- weights plan -i INV: safetensors headers and config.json -----------------------------

HEADERS = {
    "a length beyond the format": (safetensors(b"{}", length=1 << 63),
                                   "larger than the format allows (100000000)"),
    "a length beyond the file": (safetensors(b"{}", length=MAX_HEADER - 1),
                                 "is longer than the file"),
    "nested deep": (safetensors(tensor_header(x=[[[[[[[[[[[]]]]]]]]]]])),
                    "nested 13 levels deep (limit 8)"),
    "not an object": (safetensors(b"[1, 2]"), "safetensors header is not an object"),
    "a dtype that is a number": (safetensors(tensor_header(dtype=7), b"\0" * 4),
                                 "tensor 't': bad header entry"),
    "a shape of text": (safetensors(tensor_header(shape="2"), b"\0" * 4), "bad header entry"),
    "three offsets": (safetensors(tensor_header(data_offsets=[0, 2, 4]), b"\0" * 4),
                      "bad header entry"),
    "float offsets": (safetensors(b'{"t": {"dtype": "F32", "shape": [1], '
                                  b'"data_offsets": [0, 1e999]}}'), "bad header entry"),
    "metadata of numbers": (safetensors(json.dumps({"__metadata__": {"format": 1}}).encode()),
                            "__metadata__ must map names to strings"),
    "invalid UTF-8": (safetensors(b'{"\xff": 1}'), "safetensors header is not UTF-8"),
    "too short": (b"\x01\x02", "too short for a safetensors file"),
}


@pytest.mark.parametrize("case", HEADERS, ids=list(HEADERS))
def test_a_hostile_safetensors_header_is_refused(tmp_path, startup, case):
    model = model_dir(tmp_path)
    content, phrase = HEADERS[case]
    (model / SHARD).write_bytes(content)
    refused(plan_cli(tmp_path, model), startup, prefix=f"error: {model / SHARD}: ",
            phrase=phrase)


CONFIGS = {
    "a list": (lambda m: (m / "config.json").write_text("[4]"), None,
               "config.json must be a JSON object"),
    "a trillion layers": (lambda m: (m / "config.json").write_text(
        '{"num_hidden_layers": 1000000000000}'), "num_hidden_layers",
        "not an integer from 1 to 1024"),
    "nested deep": (lambda m: (m / "config.json").write_text(deep_json(10_000)), None,
                    "nested 10001 levels deep"),
}


@pytest.mark.parametrize("case", CONFIGS, ids=list(CONFIGS))
def test_a_hostile_config_json_is_refused_by_weights_plan(tmp_path, startup, case):
    model = model_dir(tmp_path)
    (model / "config.json").unlink()
    make, field, phrase = CONFIGS[case]
    make(model)
    prefix = f"error: {model / 'config.json'}: " + (f"{field}: " if field else "")
    refused(plan_cli(tmp_path, model), startup, prefix=prefix, phrase=phrase)


def test_a_fifo_config_json_is_refused_by_the_listing(tmp_path, startup):
    model = model_dir(tmp_path)
    (model / "config.json").unlink()
    fifo(model / "config.json")
    refused(plan_cli(tmp_path, model), startup, prefix=f"error: {model}: ",
            phrase="'config.json' is a FIFO, not a regular file")


def test_the_valid_model_is_planned(tmp_path):
    done, _ = plan_cli(tmp_path, model_dir(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "pipeline split (4 layers)" in done.stdout


def test_read_header_refuses_a_fifo_without_blocking(tmp_path):
    with hang_guard(), pytest.raises(InputError, match="a FIFO"):
        read_header(fifo(tmp_path / "model.safetensors"))


# -- a manifest file (load_manifest) ----------------------------------------------------

def manifest_file(path: Path, entries: object) -> Path:
    path.write_text(json.dumps({"format": "ascendctl-weights-manifest/1", "entries": entries}))
    return path


def text_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


ENTRY = {"path": "a.bin", "size": 1, "sha256": "0" * 64, "fingerprint": "fp1:0"}
MANIFESTS = {
    "a FIFO": (fifo, "a FIFO, not a regular file"),
    "a device": (lambda p: Path("/dev/zero"), "a device, not a regular file"),
    "too large": (lambda p: sparse(p, MAX_MANIFEST_BYTES + 1), "too large"),
    "nested deep": (lambda p: text_file(p, deep_json(100_000)), "nested"),
    "entries an object": (lambda p: manifest_file(p, {"a": 1}), "entries: must be a list"),
    "a size as text": (lambda p: manifest_file(p, [{**ENTRY, "size": "1"}]),
                       "entries[0]: needs path, size, sha256 and fingerprint"),
    "a path as a list": (lambda p: manifest_file(p, [{**ENTRY, "path": ["a"]}]),
                         "entries[0]: needs path"),
    "an escaping path": (lambda p: manifest_file(p, [ENTRY, {**ENTRY, "path": "../x"}]),
                         "entries[1].path: file name '../x' escapes"),
}


@pytest.mark.parametrize("case", MANIFESTS, ids=list(MANIFESTS))
def test_a_hostile_manifest_is_refused(tmp_path, case):
    make, phrase = MANIFESTS[case]
    path = make(tmp_path / "manifest.json")
    with hang_guard(), pytest.raises(InputError) as caught:
        load_manifest(path)
    assert caught.value.file == str(path) and phrase in str(caught.value), str(caught.value)


def test_a_device_as_hash_cache_is_refused(tmp_path):
    with pytest.raises(InputError, match="a device, not a regular file"):
        HashCache(Path("/dev/zero"))
