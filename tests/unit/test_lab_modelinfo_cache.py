"""The lab keeps vLLM's model-info cache across labs: what a stopped node wrote is kept next
to its vLLM layer, and every node provisioned from that layer gets it; what a node wrote is
untrusted (names, symlinks, size, shape)."""

from __future__ import annotations

import json
from pathlib import Path

from ascendctl_lab import modelinfo_cache
from ascendctl_lab.modelinfo_cache import NODE_DIR

# The shape vLLM 0.32 writes (registry.py `_save_modelinfo_to_cache`), abridged.
ENTRY = {"hash": "0f3c1d", "modelinfo": {"architecture": "Qwen3ForCausalLM",
                                         "supports_pp": True, "is_text_generation_model": True}}
NAME = "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json"


def image(tmp_path: Path) -> list[Path]:
    layers = [tmp_path / "images/base-1/rootfs", tmp_path / "images/vllm-2/layer",
              tmp_path / "images/podman-3/layer"]
    for layer in layers:
        layer.mkdir(parents=True)
    return layers


def node_upper(tmp_path: Path, name: str) -> Path:
    upper = tmp_path / "labs" / name / "upper"
    upper.mkdir(parents=True)
    return upper


def test_a_file_a_node_wrote_reaches_the_next_labs_nodes(tmp_path):
    layers = image(tmp_path)
    first = node_upper(tmp_path, "a")
    (first / NODE_DIR).mkdir(parents=True)
    (first / NODE_DIR / NAME).write_text(json.dumps(ENTRY))

    assert modelinfo_cache.harvest(first, layers) == 1
    kept = tmp_path / "images/vllm-2/modelinfos" / NAME
    assert json.loads(kept.read_text()) == ENTRY
    assert modelinfo_cache.harvest(first, layers) == 0      # the host has it already

    second = node_upper(tmp_path, "b")
    assert modelinfo_cache.seed(second, layers) == 1
    seeded = second / NODE_DIR / NAME
    assert json.loads(seeded.read_text()) == ENTRY
    assert seeded.stat().st_mode & 0o777 == 0o644


def test_nothing_without_a_vllm_layer_or_a_cache(tmp_path):
    base_only = [tmp_path / "bare/base-1/rootfs"]
    base_only[0].mkdir(parents=True)
    upper = node_upper(tmp_path, "a")
    assert modelinfo_cache.seed(upper, base_only) == 0
    assert modelinfo_cache.harvest(upper, base_only) == 0
    assert modelinfo_cache.seed(upper, image(tmp_path)) == 0     # no cache on the host yet
    assert not (upper / NODE_DIR).exists()


def test_what_a_node_wrote_is_checked_before_it_is_kept(tmp_path):
    layers = image(tmp_path)
    upper = node_upper(tmp_path, "a")
    cache = upper / NODE_DIR
    cache.mkdir(parents=True)
    secret = tmp_path / "host-secret"
    secret.write_text(json.dumps(ENTRY))
    (cache / "linked.json").symlink_to(secret)                         # a symlink
    (cache / "huge.json").write_text(json.dumps({**ENTRY, "pad": "x" * 70_000}))
    (cache / "other.json").write_text(json.dumps({"hash": 1, "modelinfo": []}))
    (cache / "bad name.json").write_text(json.dumps(ENTRY))
    (cache / "broken.json").write_text("{not json")
    (cache / NAME).write_text(json.dumps(ENTRY))

    assert modelinfo_cache.harvest(upper, layers) == 1
    assert sorted(p.name for p in (tmp_path / "images/vllm-2/modelinfos").iterdir()) == [NAME]


def test_a_symlinked_cache_directory_is_neither_read_nor_written(tmp_path):
    layers = image(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".cache/vllm/modelinfos").mkdir(parents=True)
    (elsewhere / ".cache/vllm/modelinfos" / NAME).write_text(json.dumps(ENTRY))
    upper = node_upper(tmp_path, "a")
    (upper / "root").symlink_to(elsewhere)
    assert modelinfo_cache.harvest(upper, layers) == 0

    host = tmp_path / "images/vllm-2/modelinfos"
    host.mkdir()
    (host / NAME).write_text(json.dumps(ENTRY))
    (elsewhere / ".cache/vllm/modelinfos" / NAME).unlink()
    assert modelinfo_cache.seed(upper, layers) == 0
    assert not (elsewhere / ".cache/vllm/modelinfos" / NAME).exists()
