"""`slo.quality` and its prompt sets: read with the inventory, every mistake reported as
`file:line: field: message` (the prompt file's own line when the mistake is in it), exit
2 from `inventory check` with nothing contacted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.inventory.prompts import (
    BUILTIN, Expectation, builtin_prompt_set, load_prompt_file,
)
from ascendctl.load import load_inventory

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"

GOOD_PROMPTS = """\
# a prompt set with one of each kind of expected answer
- id: arithmetic
  prompt: "2 + 2 ="
  contains: "4"
- id: capital
  messages:
    - {role: system, content: "Answer in one word."}
    - {role: user, content: "The capital of France?"}
  regex: "(?i)\\\\bparis\\\\b"
  max_tokens: 8
- prompt: "Hello"
  exact: ", world"
"""


def inventory_with(tmp_path: Path, quality: object) -> Path:
    data = yaml.safe_load(GOOD.read_text())
    data["all"]["vars"]["slo"] = {"max_p99_ttft_ms": 1000, "quality": quality}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_yaml_prompt_set_with_each_kind_of_expected_answer(tmp_path):
    prompts = write(tmp_path, "prompts.yaml", GOOD_PROMPTS)
    inv = load_inventory(inventory_with(tmp_path, {"prompts": str(prompts)}))
    spec = inv.slo.quality
    assert spec.mode == "prompts" and spec.max_tokens == 32 and spec.concurrency == 4
    loaded = spec.prompt_set()
    assert [p.id for p in loaded.prompts] == ["arithmetic", "capital", "prompt-3"]
    assert loaded.prompts[0].expect == Expectation("contains", "4")
    assert loaded.prompts[1].messages[1].content == "The capital of France?"
    assert loaded.prompts[1].expect.matches("It is Paris.")
    assert not loaded.prompts[1].expect.matches("Parisian")
    assert loaded.prompts[2].expect.matches(", world") and \
        not loaded.prompts[2].expect.matches(", world!")
    assert [p.line for p in loaded.prompts] == [2, 5, 11]
    # what the node is asked: the prompt's own token limit, else slo.quality.max_tokens
    assert loaded.requests(32)[1] == {
        "id": "capital", "max_tokens": 8,
        "messages": [{"role": "system", "content": "Answer in one word."},
                     {"role": "user", "content": "The capital of France?"}]}
    assert loaded.requests(32)[0] == {"id": "arithmetic", "max_tokens": 32, "prompt": "2 + 2 ="}


def test_the_digest_changes_with_what_the_model_is_asked_not_with_expectations(tmp_path):
    first = load_prompt_file(write(tmp_path, "a.yaml", GOOD_PROMPTS), require_expectations=True)
    other_answer = GOOD_PROMPTS.replace('contains: "4"', 'contains: "5"')
    second = load_prompt_file(write(tmp_path, "b.yaml", other_answer), require_expectations=True)
    assert first.digest(32) == second.digest(32)
    assert first.digest(32) != first.digest(16)
    other_prompt = GOOD_PROMPTS.replace('"2 + 2 ="', '"2 + 3 ="')
    third = load_prompt_file(write(tmp_path, "c.yaml", other_prompt), require_expectations=True)
    assert third.digest(32) != first.digest(32)


def test_a_jsonl_prompt_set(tmp_path):
    path = write(tmp_path, "prompts.jsonl",
                 '{"id": "a", "prompt": "1 + 1 =", "regex": "^\\\\s*2"}\n\n'
                 '{"id": "b", "messages": [{"role": "user", "content": "hi"}], '
                 '"exact": "hello"}\n')
    loaded = load_prompt_file(path, require_expectations=True)
    assert [(p.id, p.line, p.expect.kind) for p in loaded.prompts] == \
        [("a", 1, "regex"), ("b", 3, "exact")]
    assert loaded.prompts[0].expect.matches(" 2, of course")


def test_agreement_mode_uses_the_builtin_set_shipped_as_package_data(tmp_path):
    inv = load_inventory(inventory_with(tmp_path, {"agree_with_previous": True,
                                                   "min_agreement": 0.95}))
    spec = inv.slo.quality
    assert spec.mode == "agree_with_previous" and spec.min_agreement == 0.95
    builtin = spec.prompt_set()
    assert builtin.source == BUILTIN and builtin == builtin_prompt_set()
    assert len(builtin.prompts) >= 12
    assert all(p.expect is None and p.prompt for p in builtin.prompts)
    # they fit the lab's engine (max_model_len 256) with room for the answer
    assert all(len(p.prompt.encode()) < 160 for p in builtin.prompts)


def test_agreement_mode_with_a_prompt_file_makes_expectations_optional(tmp_path):
    prompts = write(tmp_path, "p.yaml", '- prompt: "no expectation"\n- prompt: "x"\n'
                                        '  contains: "y"\n')
    inv = load_inventory(inventory_with(tmp_path, {"agree_with_previous": True,
                                                   "prompts": str(prompts)}))
    loaded = inv.slo.quality.prompt_set()
    assert [p.expect for p in loaded.prompts] == [None, Expectation("contains", "y")]


BAD_PROMPT_FILES = [
    ("unknown_key", '- prompt: "a"\n  contains: "b"\n  answer: "c"\n', 3, "[0].answer",
     "unknown key 'answer'"),
    ("no_expectation", '- prompt: "a"\n  contains: "b"\n- prompt: "c"\n', 3, "[1]",
     "no expected answer"),
    ("two_expectations", '- prompt: "a"\n  contains: "b"\n  regex: "c"\n', 3, "[0].regex",
     "not both contains and regex"),
    ("bad_regex", '- prompt: "a"\n  contains: "b"\n- id: second\n  prompt: "c"\n'
                  '  regex: "(unclosed"\n', 5, "[1].regex", "bad regular expression"),
    ("prompt_and_messages", '- prompt: "a"\n  messages: [{role: user, content: b}]\n'
                            '  exact: "c"\n', 1, "[0]", "exactly one of `prompt`"),
    ("bad_role", '- messages: [{role: robot, content: b}]\n  exact: "c"\n', 1,
     "[0].messages[0].role", "'robot' is not one of"),
    ("duplicate_id", '- {id: a, prompt: x, exact: y}\n- {id: a, prompt: z, exact: y}\n', 2,
     "[1].id", "duplicate id 'a' (first on line 1)"),
    ("number_answer", '- prompt: "2 + 2 ="\n  exact: 4\n', 2, "[0].exact", "quote it"),
    ("max_tokens", '- {prompt: a, exact: b, max_tokens: 0}\n', 1, "[0].max_tokens",
     "from 1 to 4096"),
    ("empty_contains", '- {prompt: a, contains: ""}\n', 1, "[0].contains",
     "matches every answer"),
    ("control_character", '- {prompt: "a\\u0007", exact: b}\n', 1, "[0].prompt",
     "must not contain U+0007 (character 2), a control character"),
]


@pytest.mark.parametrize("name, text, line, field, message", BAD_PROMPT_FILES,
                         ids=[case[0] for case in BAD_PROMPT_FILES])
def test_a_bad_prompt_file_names_its_own_line_and_field(tmp_path, name, text, line, field,
                                                        message):
    prompts = write(tmp_path, f"{name}.yaml", text)
    with pytest.raises(InputError) as caught:
        load_inventory(inventory_with(tmp_path, {"prompts": str(prompts)}))
    error = caught.value
    assert str(error).startswith(f"{prompts}:{line}: {field}: "), str(error)
    assert message in str(error) and "\n" not in str(error)


def test_a_bad_jsonl_line_is_named(tmp_path):
    prompts = write(tmp_path, "p.jsonl", '{"prompt": "a", "exact": "b"}\n{"prompt": "c", \n')
    with pytest.raises(InputError) as caught:
        load_prompt_file(prompts, require_expectations=True)
    assert str(caught.value).startswith(f"{prompts}:2: not a JSON object")
    entry = write(tmp_path, "q.jsonl", '{"prompt": "a", "exact": "b"}\n["a list"]\n')
    with pytest.raises(InputError, match=r"q\.jsonl:2: each prompt is a mapping"):
        load_prompt_file(entry, require_expectations=True)


@pytest.mark.parametrize("quality, field, message", [
    ({"prompts": "relative/prompts.yaml"}, "slo.quality.prompts", "absolute path"),
    ({"prompts": "/nonexistent/prompts.yaml"}, "slo.quality", "does not exist on this machine"),
    ({"max_tokens": 16}, "slo.quality", "give `prompts: FILE`"),
    ({"prompts": "/etc/hostname", "min_agreement": 0.5}, "slo.quality",
     "applies to agree_with_previous"),
    ({"agree_with_previous": True, "min_agreement": 1.5}, "slo.quality.min_agreement",
     "less than or equal to 1"),
    ({"agree_with_previous": True, "concurrency": 0}, "slo.quality.concurrency",
     "greater than or equal to 1"),
    ({"agree_with_previous": True, "promts": "/x"}, "slo.quality.promts",
     "did you mean 'prompts'"),
])
def test_a_bad_quality_block_names_the_inventory_line(tmp_path, quality, field, message):
    path = inventory_with(tmp_path, quality)
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    error = caught.value
    assert error.file == str(path) and error.field == f"all.vars.{field}", str(error)
    assert error.line == line_of(path, field.split(".")[-1] + ":"), str(error)
    assert message in str(error)


def test_a_prompt_file_of_another_type_is_refused(tmp_path):
    path = write(tmp_path, "prompts.txt", "2 + 2 = 4\n")
    with pytest.raises(InputError, match=r"prompts\.txt: a prompt set is a \.yaml"):
        load_inventory(inventory_with(tmp_path, {"prompts": str(path)}))


def test_inventory_check_prints_the_prompt_file_line_and_exits_2(tmp_path):
    prompts = write(tmp_path, "prompts.yaml", '- prompt: "a"\n  regex: "[z-a]"\n')
    path = inventory_with(tmp_path, {"prompts": str(prompts)})
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == Exit.USAGE and result.stdout == ""
    assert f"{prompts}:2: [0].regex: bad regular expression" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
