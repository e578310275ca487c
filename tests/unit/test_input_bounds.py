"""Every file the operator hands ascendctl is read the bounded way (issue 13): secrets with
a CI's trailing newline, weights headers and indexes nested very deep, model configs with
numbers beyond Python's limits - each an InputError naming the file, never a traceback and
never the secret's value."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.inventory.inputfile import json_depth, parse_json
from ascendctl.render.secrets import resolve_secrets

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"
KEY = "sk-ci-0123456789abcdef"


def inventory_with_key_file(tmp_path: Path, content: bytes):
    key = tmp_path / "api.key"
    key.write_bytes(content)
    key.chmod(0o600)
    text = GOOD.read_text().replace("api_key: {env: TEST_API_KEY}", f"api_key: {{file: {key}}}")
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path, check_files=False)


@pytest.mark.parametrize("content", [KEY.encode(), (KEY + "\n").encode(),
                                     (KEY + "\r\n").encode()])
def test_one_final_newline_is_normal(tmp_path, content):
    assert resolve_secrets(inventory_with_key_file(tmp_path, content)) == {"api_key": KEY}


@pytest.mark.parametrize("content, why", [
    ((KEY + "\n" + KEY + "\n").encode(), "more than one line"),
    ((KEY + "\n\n").encode(), "more than one line"),
    (("sk-ci \x1b[2J" + KEY).encode(), "spaces or control characters"),
    (b"\n", "is empty"),
    (b"\xff\xfe" + KEY.encode(), "not UTF-8"),
])
def test_a_bad_key_file_is_refused_without_showing_it(tmp_path, content, why):
    with pytest.raises(InputError) as caught:
        resolve_secrets(inventory_with_key_file(tmp_path, content))
    assert why in str(caught.value) and KEY not in str(caught.value)
    assert caught.value.field == "serving.api_key"


def test_a_ci_variable_with_a_trailing_newline_is_accepted(monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", KEY + "\n")
    assert resolve_secrets(load_inventory(GOOD, check_files=False)) == {"api_key": KEY}
    monkeypatch.setenv("TEST_API_KEY", KEY + "\nsecond line")
    with pytest.raises(InputError, match="more than one line") as caught:
        resolve_secrets(load_inventory(GOOD, check_files=False))
    assert KEY not in str(caught.value)


def test_deep_json_is_refused_before_parsing():
    deep = "[" * 100_000 + "]" * 100_000
    assert json_depth(deep) == 100_000
    with pytest.raises(InputError, match="nested 100000 levels deep"):
        parse_json(deep, file="x.json")
    assert json_depth('{"a": "[[[[[[", "b": [1, {"c": "\\"]]]"}]}') == 3


@pytest.mark.parametrize("text, phrase", [
    ('{"n": ' + "9" * 5000 + "}", "not valid"),
    ('{"n": NaN}', "not a JSON number"),
    ('{"n": 1', "not valid"),
])
def test_bad_json_numbers_and_syntax(text, phrase):
    with pytest.raises(InputError, match=phrase):
        parse_json(text, file="x.json")


def test_deeply_nested_safetensors_header_is_an_input_error(tmp_path):
    from ascendctl.weights.safetensors_file import read_header

    header = ('{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": '
              + "[" * 50_000 + "]" * 50_000 + "}}").encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(InputError, match="nested"):
        read_header(path)


def test_huge_offsets_in_a_safetensors_header_are_an_input_error(tmp_path):
    from ascendctl.weights.safetensors_file import read_header

    header = b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 1e999]}}'
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(InputError):
        read_header(path)


def test_deeply_nested_index_and_model_config(tmp_path):
    from ascendctl.plan.modelcfg import load_model_config
    from ascendctl.weights.index import read_index

    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": ' + "[" * 20_000 + "]" * 20_000 + "}}")
    with pytest.raises(InputError, match="nested"):
        read_index(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 2}).replace("2", "2" * 5000))
    with pytest.raises(InputError):
        load_model_config(config)
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(InputError, match="FIFO"):
        load_model_config(tmp_path / "fifo.json")
