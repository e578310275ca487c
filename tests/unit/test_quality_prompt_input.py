"""What a prompt set may hold, checked when it is loaded (with the inventory): no literal
secret, no terminal control character, no lone surrogate, no duplicate JSON key, token
limits that fit serving.max_model_len; within the documented size limits, which load
quickly."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.inventory.promptfile import (
    MAX_ENTRIES, MAX_JSONL_BYTES, MAX_YAML_BYTES, MAX_YAML_VALUES,
)
from ascendctl.inventory.prompts import load_prompt_file
from ascendctl.load import load_inventory

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "quality.md"
LOAD_BOUND_S = 2.0


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def jsonl(*entries: object) -> str:
    return "".join(json.dumps(entry) + "\n" for entry in entries)


def refused(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_prompt_file(path, require_expectations=True)
    assert "\n" not in str(caught.value)
    return caught.value


def inventory_with(tmp_path: Path, quality: dict, max_model_len: int = 256) -> Path:
    data = yaml.safe_load(GOOD.read_text())
    data["all"]["vars"]["serving"]["max_model_len"] = max_model_len
    data["all"]["vars"]["slo"] = {"quality": quality}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- secrets -----------------------------------------------------------------------------------

SECRETS = [
    ("sk-proj-abcdefghijklmnop0123", "an OpenAI-style key"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9abc", "a bearer token"),
    ("hf_abcdefghijklmnopqrstuvwxyz0123456789", "a Hugging Face token"),
    ("AKIAABCDEFGHIJKLMNOP", "an AWS access key"),
    ("https://admin:pa55word@example.com/x", "a password in a URL"),
    ("-----BEGIN RSA PRIVATE KEY-----", "a private key"),
    ("use api_key=abcdef123456 here", "a key=value secret"),
]
PLACES = [
    ({"prompt": "{}", "contains": "x"}, "prompt"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "{}"}],
      "contains": "x"}, "messages[1].content"),
    ({"prompt": "a", "exact": "{}"}, "exact"),
    ({"prompt": "a", "contains": "{}"}, "contains"),
    ({"prompt": "a", "regex": "{}"}, "regex"),
]


@pytest.mark.parametrize("secret, kind", SECRETS, ids=[k for _s, k in SECRETS])
@pytest.mark.parametrize("entry, field", PLACES, ids=[f for _e, f in PLACES])
def test_a_literal_secret_is_refused_by_kind_never_shown(tmp_path, secret, kind, entry, field):
    text = json.dumps(entry).replace("{}", json.dumps(secret)[1:-1])
    path = write(tmp_path, "p.jsonl", jsonl({"prompt": "fine", "contains": "x"}) + text + "\n")
    error = refused(path)
    assert (error.line, error.field) == (2, field)
    assert str(error).startswith(f"{path}:2: {field}: {kind}")
    assert secret not in str(error) and secret.split()[-1] not in str(error)


def test_a_secret_in_a_yaml_chat_names_its_own_line(tmp_path):
    path = write(tmp_path, "p.yaml", "- id: chat\n  messages:\n"
                                     "    - {role: system, content: be brief}\n"
                                     "    - role: user\n"
                                     "      content: 'token=abcdef123456'\n"
                                     "  contains: x\n")
    error = refused(path)
    assert (error.line, error.field) == (5, "[0].messages[1].content")
    assert "abcdef123456" not in str(error)


# -- characters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("char, what", [
    ("\x1b", "U+001B, a control character"),
    ("\x07", "U+0007, a control character"),
    ("\x7f", "U+007F, a control character"),
    ("\x85", "U+0085, a control character"),
    ("\x9b", "U+009B, a control character"),
    ("\u202e", "U+202E, a bidirectional control"),
    ("\u2067", "U+2067, a bidirectional control"),
    ("\ud83d", "U+D83D, a lone surrogate, which is not text"),
])
@pytest.mark.parametrize("entry, field", [
    ({"prompt": "ab{}", "contains": "x"}, "prompt"),
    ({"messages": [{"role": "user", "content": "ab{}"}], "contains": "x"}, "messages[0].content"),
    ({"prompt": "a", "exact": "ab{}"}, "exact"),
    ({"prompt": "a", "contains": "ab{}"}, "contains"),
    ({"prompt": "a", "regex": "ab{}"}, "regex"),
], ids=["prompt", "content", "exact", "contains", "regex"])
def test_terminal_controls_and_lone_surrogates_are_refused(tmp_path, char, what, entry, field):
    text = json.dumps(entry).replace("{}", json.dumps(char)[1:-1])
    error = refused(write(tmp_path, "p.jsonl", text + "\n"))
    assert (error.line, error.field) == (1, field)
    code, kind = what.split(", ", 1)
    assert str(error).startswith(f"{error.file}:1: {field}: must not contain {code} "
                                 f"(character 3), {kind}")


def test_newlines_tabs_and_text_of_any_language_are_fine(tmp_path):
    path = write(tmp_path, "p.jsonl", jsonl(
        {"prompt": "a\r\nb\tc", "exact": "\u00e9\u4e2d\U0001f642 \u05e9\u05dc\u05d5\u05dd\u200f"},
        {"messages": [{"role": "user", "content": "\u0645\u0631\u062d\u0628\u0627"}],
         "regex": "\\d+\\s*\u00b0C"}))
    loaded = load_prompt_file(path, require_expectations=True)
    assert [p.expect.kind for p in loaded.prompts] == ["exact", "regex"]
    assert re.fullmatch("[0-9a-f]{64}", loaded.digest(32))


# -- JSONL -------------------------------------------------------------------------------------

def test_a_duplicate_key_is_refused_not_silently_the_last(tmp_path):
    path = write(tmp_path, "p.jsonl", jsonl({"prompt": "a", "contains": "b"})
                 + '{"prompt": "a", "contains": "b", "contains": "c"}\n')
    error = refused(path)
    assert str(error) == f"{path}:2: duplicate key 'contains': JSON would keep only the last"


def test_one_leading_bom_is_skipped(tmp_path):
    plain = jsonl({"id": "a", "prompt": "x", "contains": "y"}, {"prompt": "z", "exact": "w"})
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + plain.encode())
    first = load_prompt_file(write(tmp_path, "plain.jsonl", plain), require_expectations=True)
    second = load_prompt_file(with_bom, require_expectations=True)
    assert first.prompts == second.prompts and [p.line for p in second.prompts] == [1, 2]


def test_a_deep_line_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, "p.jsonl", '{"prompt": "a", "contains": "b", "x": '
                 + "[" * 200_000 + "]" * 200_000 + "}\n")
    started = time.process_time()
    error = refused(path)
    assert time.process_time() - started < 1.0
    assert str(error) == f"{path}:1: nested 200001 levels deep (at most 64)"


def test_an_unterminated_line_of_escaped_quotes_is_read_in_linear_time(tmp_path):
    """json_depth once rescanned the rest of the line from every quote: 80 KB took 35 s."""
    path = write(tmp_path, "p.jsonl", '{"prompt": "' + '\\"' * ((MAX_JSONL_BYTES - 20) // 2)
                 + "\n")
    started = time.process_time()
    error = refused(path)
    assert time.process_time() - started < LOAD_BOUND_S
    assert str(error).startswith(f"{path}:1: not a JSON object: Unterminated string")


# -- token limits, at inventory check --------------------------------------------------------

def test_the_sets_max_tokens_must_fit_max_model_len_at_inventory_check(tmp_path):
    path = inventory_with(tmp_path, {"agree_with_previous": True, "max_tokens": 128},
                          max_model_len=128)
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    error = caught.value
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if "max_tokens:" in text)
    assert (error.file, error.line, error.field) == \
        (str(path), line, "all.vars.slo.quality.max_tokens")
    assert str(error).endswith("max_tokens 128 leaves no room for the prompt in "
                               "serving.max_model_len 128")
    assert load_inventory(inventory_with(tmp_path, {"agree_with_previous": True,
                                                    "max_tokens": 127}, max_model_len=128))


def test_a_prompts_own_max_tokens_is_named_in_the_prompt_file(tmp_path):
    prompts = write(tmp_path, "p.yaml", "- {prompt: a, contains: b}\n"
                                        "- id: long\n  prompt: c\n  contains: d\n"
                                        "  max_tokens: 300\n")
    with pytest.raises(InputError) as caught:
        load_inventory(inventory_with(tmp_path, {"prompts": str(prompts)}))
    error = caught.value
    assert (error.file, error.line, error.field) == (str(prompts), 5, "[1].max_tokens")
    assert "max_tokens 300 leaves no room" in str(error) and "(prompt long)" in str(error)


def test_the_sets_limit_only_counts_for_prompts_without_their_own(tmp_path):
    prompts = write(tmp_path, "p.jsonl", jsonl({"prompt": "a", "contains": "b",
                                                "max_tokens": 16}))
    inv = load_inventory(inventory_with(tmp_path, {"prompts": str(prompts), "max_tokens": 256}))
    assert inv.slo.quality.prompt_set().requests(256)[0]["max_tokens"] == 16


# -- sizes ---------------------------------------------------------------------------------------

def documented_limits() -> dict[str, str]:
    text = DOCS.read_text()
    return {"yaml": re.search(r"YAML file at most (\d+ [KM]iB)", text).group(1),
            "values": re.search(r"and ([\d ]+) values", text).group(1).replace(" ", ""),
            "jsonl": re.search(r"JSONL file at most (\d+ [KM]iB)", text).group(1),
            "prompts": re.search(r"At most ([\d ]+) prompts", text).group(1).replace(" ", "")}


def test_the_documented_limits_are_the_ones_enforced():
    assert documented_limits() == {"yaml": f"{MAX_YAML_BYTES >> 10} KiB",
                                   "values": str(MAX_YAML_VALUES),
                                   "jsonl": f"{MAX_JSONL_BYTES >> 20} MiB",
                                   "prompts": str(MAX_ENTRIES)}


def words(count: int) -> str:
    vocabulary = ("the", "capital", "of", "France", "is", "Question:", "17", "x", "23")
    return " ".join(vocabulary[i % len(vocabulary)] for i in range(count))


def test_a_yaml_set_at_its_size_limit_loads_quickly(tmp_path):
    per_entry = MAX_YAML_BYTES // MAX_ENTRIES
    frame = len('- prompt: ""\n  contains: "x"\n')
    entry = f'- prompt: "{words(per_entry)[:per_entry - frame]}"\n  contains: "x"\n'
    path = write(tmp_path, "p.yaml", entry * MAX_ENTRIES)
    assert MAX_YAML_BYTES - MAX_ENTRIES <= path.stat().st_size <= MAX_YAML_BYTES
    started = time.process_time()
    loaded = load_prompt_file(path, require_expectations=True)
    assert time.process_time() - started < LOAD_BOUND_S
    assert len(loaded.prompts) == MAX_ENTRIES


def test_a_jsonl_set_at_its_size_limit_loads_quickly(tmp_path):
    per_line = MAX_JSONL_BYTES // MAX_ENTRIES
    frame = len(json.dumps({"prompt": "", "contains": "x"})) + 1
    line = json.dumps({"prompt": words(per_line)[:per_line - frame], "contains": "x"}) + "\n"
    path = write(tmp_path, "p.jsonl", line * MAX_ENTRIES)
    assert MAX_JSONL_BYTES - MAX_ENTRIES <= path.stat().st_size <= MAX_JSONL_BYTES
    started = time.process_time()
    loaded = load_prompt_file(path, require_expectations=True)
    assert time.process_time() - started < LOAD_BOUND_S
    assert len(loaded.prompts) == MAX_ENTRIES


def test_a_yaml_file_of_tiny_values_is_refused_before_it_is_composed(tmp_path):
    path = write(tmp_path, "p.yaml", "- {prompt: a, contains: b}\n- ["
                 + ",".join("a" for _ in range(MAX_YAML_BYTES // 3)) + "]\n")
    started = time.process_time()
    error = refused(path)
    assert time.process_time() - started < 0.5
    assert str(error).startswith(f"{path}:2: more than {MAX_YAML_VALUES} values")


def test_one_byte_over_a_limit_is_refused(tmp_path):
    over = write(tmp_path, "p.yaml", "- {prompt: a, contains: b}\n" + "#" * MAX_YAML_BYTES)
    assert "too large for a prompt set" in str(refused(over))
    over = write(tmp_path, "p.jsonl", jsonl({"prompt": "a", "contains": "b"})
                 + " " * MAX_JSONL_BYTES)
    assert "too large for a prompt set" in str(refused(over))
