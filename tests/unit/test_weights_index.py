"""The index of a model directory may not name anything outside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ascendctl.errors import InputError
from ascendctl.weights.index import INDEX_NAME, read_index


def write_index(root, weight_map):
    (root / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map},
                                              indent=2))


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "sub/../../x"])
def test_escaping_names_are_refused_with_line_and_field(tmp_path, bad):
    (tmp_path / "a.safetensors").write_bytes(b"")
    write_index(tmp_path, {"model.embed_tokens.weight": "a.safetensors",
                           "lm_head.weight": bad})
    with pytest.raises(InputError) as err:
        read_index(tmp_path)
    message = str(err.value)
    assert f"{tmp_path / INDEX_NAME}:5:" in message       # file and line
    assert "weight_map.lm_head.weight" in message          # field


def test_symlink_leading_out_is_refused(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (tmp_path / "outside.safetensors").write_bytes(b"")
    (model / "x.safetensors").symlink_to(tmp_path / "outside.safetensors")
    write_index(model, {"w": "x.safetensors"})
    with pytest.raises(InputError, match="outside the model directory"):
        read_index(model)


def test_missing_file_is_refused(tmp_path):
    write_index(tmp_path, {"w": "model-00009-of-00009.safetensors"})
    with pytest.raises(InputError, match="not in the model directory"):
        read_index(tmp_path)


def test_good_index_is_read(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.safetensors").write_bytes(b"")
    write_index(tmp_path, {"w": "./sub/a.safetensors"})
    assert read_index(tmp_path)["weight_map"] == {"w": "sub/a.safetensors"}


def test_cli_refuses_with_exit_2_before_hashing(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(b"")
    write_index(tmp_path, {"w": "../../etc/passwd"})
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "weights", "manifest",
                           str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "ASCENDCTL_HASH_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 2
    assert "escapes the model directory" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "c").exists()
