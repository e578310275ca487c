"""The hostile prompt-set corpus: prompt files that are malformed, pathological or carry
what must not be there (a pasted key, terminal control characters, lone surrogates), each
refused by `ascendctl inventory check` (in the module's CLI runner, tests/unit/cli_runner.py;
one case also as a child process of its own) with exit 2 and one line
`error: file:line: field: message`, no traceback, no secret's value, quickly.

"Quickly" is the run's CPU time (under 2 s): it is what quadratic or exponential work would
blow up, and unlike the wall time it does not depend on what else the machine runs. The
cases are here rather than as files: a JSONL file has no room for a header saying what its
error must be.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.exitcodes import Exit
from ascendctl.inventory.promptfile import MAX_JSONL_BYTES, MAX_YAML_BYTES, MAX_YAML_VALUES
from ascendctl.load import load_inventory
from tests.unit.cli_runner import CliRunner

GOOD = Path(__file__).parent.parent / "fixtures" / "inventories" / "good.yaml"
MAX_MODEL_LEN = 256
CPU_BOUND_S = 2.0
SECRETS = ("sk-live-0123456789abcdef", "Bearer abcdefgh12345678",
           "hf_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789")


@dataclass(frozen=True)
class Case:
    name: str
    suffix: str                    # .jsonl or .yaml
    content: Union[str, bytes]
    line: Optional[int]            # None: the error names the file only
    field: Optional[str]
    message: str


def jsonl(*entries: object) -> str:
    return "".join(json.dumps(entry) + "\n" for entry in entries)


OK = {"prompt": "2 + 2 =", "contains": "4"}
CASES = [
    # -- parser limits: no RecursionError, no OverflowError, no quadratic scan --
    Case("jsonl_nested_deep", ".jsonl", jsonl(OK) + '{"prompt": "a", "contains": "b", "x": '
         + "[" * 100_000 + "]" * 100_000 + "}\n", 2, None, "levels deep (at most 64)"),
    Case("jsonl_unterminated_escapes", ".jsonl", '{"prompt": "' + '\\"' * 500_000 + "\n",
         1, None, "not a JSON object"),
    Case("jsonl_nan", ".jsonl", '{"prompt": "a", "contains": "b", "max_tokens": NaN}\n', 1,
         None, "NaN is not a JSON number"),
    Case("jsonl_huge_integer", ".jsonl", '{"prompt": "a", "contains": "b", "max_tokens": '
         + "9" * 5000 + "}\n", 1, None, "not a JSON object"),
    Case("jsonl_duplicate_key", ".jsonl",
         '{"prompt": "a", "contains": "b", "prompt": "c"}\n', 1, None,
         "duplicate key 'prompt'"),
    Case("jsonl_duplicate_nested_key", ".jsonl", '{"messages": [{"role": "user", "content": '
         '"a", "content": "b"}], "contains": "c"}\n', 1, None, "duplicate key 'content'"),
    Case("jsonl_two_boms", ".jsonl", b"\xef\xbb\xbf\xef\xbb\xbf" + jsonl(OK).encode(), 1,
         None, "BOM"),
    Case("jsonl_not_utf8", ".jsonl", jsonl(OK).encode() + b'{"prompt": "\xff", '
         b'"contains": "b"}\n', 2, None, "not UTF-8"),
    Case("jsonl_too_many_prompts", ".jsonl", jsonl(*[OK] * 1001), 1001, None,
         "more than 1000 prompts"),
    Case("jsonl_too_large", ".jsonl", jsonl(OK) + " " * MAX_JSONL_BYTES + "\n", None, None,
         "too large for a prompt set"),
    # -- regular expressions --
    Case("regex_repeat_overflow", ".jsonl", jsonl({"prompt": "a", "regex": "a{99999999999}"}),
         1, "regex", "the repetition number is too large"),
    Case("regex_nested_deep", ".jsonl", jsonl({"prompt": "a", "regex": "(" * 1000 + ")" * 1000}),
         1, "regex", "groups nested 1000 deep (at most 32)"),
    Case("regex_nesting_behind_classes", ".jsonl",
         jsonl({"prompt": "a", "regex": "[)]" * 40 + "(" * 40 + ")" * 40}), 1, "regex",
         "groups nested 40 deep"),
    Case("regex_too_long", ".jsonl", jsonl({"prompt": "a", "regex": "a" * 5000}), 1, "regex",
         "5000 characters (at most 2000)"),
    Case("yaml_regex_nested_deep", ".yaml", f'- prompt: a\n  regex: "{"(" * 500 + ")" * 500}"\n',
         2, "[0].regex", "groups nested 500 deep"),
    Case("yaml_regex_unclosed", ".yaml", '- prompt: a\n  regex: "(?P<x"\n', 2, "[0].regex",
         "bad regular expression"),
    # -- what the text must not hold --
    Case("jsonl_lone_surrogate_prompt", ".jsonl", '{"prompt": "a\\ud800", "contains": "b"}\n',
         1, "prompt", "U+D800 (character 2), a lone surrogate"),
    Case("jsonl_lone_surrogate_expected", ".jsonl", '{"prompt": "a", "exact": "\\udfff"}\n',
         1, "exact", "U+DFFF (character 1), a lone surrogate"),
    Case("yaml_lone_surrogate", ".yaml", '- prompt: "a\\ud800b"\n  contains: x\n', 1,
         "[0].prompt", "lone surrogate"),
    Case("jsonl_escape_in_prompt", ".jsonl", jsonl({"prompt": "\x1b[2J\x1b[Hok", "contains": "b"}),
         1, "prompt", "U+001B (character 1), a control character"),
    Case("jsonl_c1_in_expected", ".jsonl", jsonl({"prompt": "a", "contains": "x\x9b31m"}), 1,
         "contains", "U+009B (character 2), a control character"),
    Case("jsonl_bidi_in_content", ".jsonl", jsonl({"messages": [
        {"role": "user", "content": "pay \u202eevil"}], "exact": "b"}), 1,
         "messages[0].content", "U+202E (character 5), a bidirectional control"),
    Case("yaml_escape_in_regex", ".yaml", '- prompt: a\n  regex: "\\e\\\\[31m"\n', 2,
         "[0].regex", "U+001B"),
    Case("yaml_nel_in_content", ".yaml", '- messages:\n    - {role: user, content: "a\\N"}\n'
         "  contains: b\n", 2, "[0].messages[0].content", "U+0085"),
    Case("jsonl_escape_in_unknown_key", ".jsonl", '{"\\u001b[31mred": 1, "prompt": "a"}\n', 1,
         "['\\x1b[31mred']", "unknown key '\\x1b[31mred'"),
    # -- literal secrets, never shown --
    Case("secret_openai_key_in_prompt", ".jsonl",
         jsonl({"prompt": f"use {SECRETS[0]} for this", "contains": "b"}), 1, "prompt",
         "an OpenAI-style key"),
    Case("secret_bearer_in_chat", ".yaml", "- messages:\n    - {role: system, content: hi}\n"
         f"    - {{role: user, content: 'Authorization: {SECRETS[1]}'}}\n  contains: b\n",
         3, "[0].messages[1].content", "a bearer token"),
    Case("secret_hf_token_expected", ".jsonl", jsonl({"prompt": "a", "exact": SECRETS[2]}),
         1, "exact", "a Hugging Face token"),
    Case("secret_github_token_regex", ".yaml", f"- prompt: a\n  regex: {SECRETS[3]}\n", 2,
         "[0].regex", "a GitHub token"),
    Case("secret_as_a_key", ".jsonl", jsonl({SECRETS[0]: "x", "prompt": "a"}), 1, None,
         "a key that looks like an OpenAI-style key"),
    Case("secret_as_a_duplicate_key", ".jsonl",
         f'{{"{SECRETS[0]}": 1, "{SECRETS[0]}": 2}}\n', 1, None,
         "duplicate key (not shown: it looks like a secret)"),
    Case("secret_before_a_bad_role", ".jsonl", jsonl({"messages": [
        {"role": SECRETS[0], "content": "a"}], "contains": "b"}), 1, "messages[0].role",
         "an OpenAI-style key"),
    # -- bounded messages: a huge bad value is not echoed (words, not one long run of
    # letters: the secret scanner's URL pattern is quadratic in such a run, see
    # ascendctl/inventory/secretscan.py) --
    Case("huge_role", ".jsonl", jsonl({"messages": [{"role": "r " * 50_000, "content": "a"}],
                                       "contains": "b"}), 1, "messages[0].role",
         "is not one of system, user, assistant"),
    Case("huge_unknown_key", ".yaml", f"- prompt: a\n  contains: b\n  ? {'k_' * 50_000}\n  : 1\n",
         3, "[0]['" + "k_" * 17 + "k...']", "unknown key 'k_k_"),
    # -- YAML bounds --
    Case("yaml_many_tiny_values", ".yaml", "- [" + ",".join("a" * 1 for _ in range(100_000))
         + "]\n", 1, None, f"more than {MAX_YAML_VALUES} values"),
    Case("yaml_too_large", ".yaml", '- {prompt: a, contains: b}\n' + "#\n" * MAX_YAML_BYTES,
         None, None, "too large for a prompt set"),
    Case("yaml_alias_bomb", ".yaml", "- &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"- &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(6)),
         5, None, "alias bomb"),
    # -- token limits the engine would refuse, found at inventory check --
    Case("jsonl_own_max_tokens_too_long", ".jsonl", jsonl(OK, {"id": "long", "prompt": "a",
                                                              "contains": "b",
                                                              "max_tokens": MAX_MODEL_LEN}),
         2, "max_tokens", f"max_tokens {MAX_MODEL_LEN} leaves no room for the prompt in "
                          f"serving.max_model_len {MAX_MODEL_LEN} (prompt long)"),
    Case("yaml_own_max_tokens_too_long", ".yaml", "- prompt: a\n  contains: b\n"
         f"- prompt: c\n  contains: d\n  max_tokens: {MAX_MODEL_LEN + 1}\n", 5,
         "[1].max_tokens", "leaves no room for the prompt"),
]
ACCEPTED = [
    Case("jsonl_with_bom", ".jsonl", b"\xef\xbb\xbf" + jsonl(OK).encode(), None, None, ""),
    Case("yaml_with_bom", ".yaml", "\ufeff- prompt: a\n  contains: b\n".encode(), None, None,
         ""),
    Case("unicode_text", ".jsonl", jsonl({"prompt": "法国的首都是", "contains": "巴黎"},
                                         {"prompt": "مرحبا\u200f", "regex": "(?i)\\bsalut\\b"},
                                         {"prompt": "line\r\nbreak\ttab", "exact": "🙂"}),
         None, None, ""),
    Case("secret_lookalikes", ".jsonl", jsonl({"prompt": "What does sk- mean?",
                                               "contains": "Bearer"},
                                              {"prompt": "a", "regex": "sk-[A-Za-z0-9]{20}"}),
         None, None, ""),
]


def inventory_for(directory: Path, prompts: Path) -> Path:
    data = yaml.safe_load(GOOD.read_text())
    data["all"]["vars"]["serving"]["max_model_len"] = MAX_MODEL_LEN
    data["all"]["vars"]["slo"] = {"quality": {"prompts": str(prompts)}}
    path = directory / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_case(directory: Path, case: Case) -> Path:
    path = directory / f"prompts{case.suffix}"
    if isinstance(case.content, bytes):
        path.write_bytes(case.content)
    else:
        path.write_text(case.content, encoding="utf-8", errors="surrogatepass")
    return path


@dataclass(frozen=True)
class Run:
    prompts: Path
    inventory: Path
    result: object                 # returncode, stdout, stderr
    cpu_seconds: float


ENV = {**os.environ, "TEST_API_KEY": "unit-test-key"}


def check(runner: CliRunner | None, directory: Path, case: Case) -> Run:
    """CASE through the RUNNER, or without one as `python -m ascendctl` (its CPU time read
    from this process's children's usage, start-up included)."""
    prompts = write_case(directory, case)
    inventory = inventory_for(directory, prompts)
    args = ["inventory", "check", "-i", str(inventory)]
    if runner is not None:
        result = runner.run(args, cwd=directory, env=ENV)
        return Run(prompts, inventory, result, result.cpu)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "ascendctl", *args], capture_output=True,
                          text=True, timeout=60, cwd=directory, stdin=subprocess.DEVNULL,
                          env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(prompts, inventory, done, cpu)


@pytest.fixture(scope="module")
def runs(cli_runner, tmp_path_factory) -> dict[str, Run]:
    """Every case through the CLI, one after the other."""
    return {case.name: check(cli_runner, tmp_path_factory.mktemp(case.name), case)
            for case in CASES + ACCEPTED}


def test_cases_are_distinct():
    names = [case.name for case in CASES + ACCEPTED]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_refused_in_one_line_quickly(case: Case, runs):
    assert_refused(case, runs[case.name])


def test_a_real_process_refuses_it_the_same(tmp_path):
    """`python -m ascendctl`: the exit code and the line through the interpreter, in the
    same CPU bound with the start-up."""
    assert_refused(CASES[0], check(None, tmp_path, CASES[0]))


def assert_refused(case: Case, run: Run) -> None:
    output = run.result.stdout + run.result.stderr
    assert run.result.returncode == Exit.USAGE, output[:2000]
    assert "Traceback" not in output
    lines = run.result.stderr.strip().splitlines()
    assert len(lines) == 1, run.result.stderr[:2000]
    where = f"error: {run.prompts}:{case.line}: " if case.line else f"error: {run.prompts}: "
    if case.field:
        where += f"{case.field}: "
    assert lines[0].startswith(where), lines[0][:500]
    assert case.message in lines[0], lines[0][:500]
    assert len(lines[0]) < 400 + len(str(run.prompts))       # a bounded excerpt at most
    assert lines[0].isprintable()                 # no ESC, C1, bidi control or surrogate
    assert not any(secret in output for secret in SECRETS)
    assert run.cpu_seconds < CPU_BOUND_S, f"{run.cpu_seconds:.2f} s of CPU"


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda case: case.name)
def test_legitimate_prompt_sets_are_accepted(case: Case, runs):
    run = runs[case.name]
    assert run.result.returncode == Exit.OK, run.result.stdout + run.result.stderr
    prompts = load_inventory(run.inventory).slo.quality.prompt_set()
    assert prompts.prompts and len(prompts.digest(32)) == 64


def test_the_library_raises_the_same_error(tmp_path):
    """Not only the CLI: load_inventory raises an InputError with file, line and field."""
    case = next(c for c in CASES if c.name == "yaml_own_max_tokens_too_long")
    prompts = write_case(tmp_path, case)
    with pytest.raises(InputError) as caught:
        load_inventory(inventory_for(tmp_path, prompts))
    error = caught.value
    assert (error.file, error.line, error.field) == (str(prompts), 5, "[1].max_tokens")
