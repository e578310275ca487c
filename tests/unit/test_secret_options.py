"""A literal API key given as a command-line option is refused at load, in every spelling
vLLM's parser would read (and every one it would choke on after the key was already in
engine.json and `ps`), wherever the inventory holds an argv; real vLLM options that only
look close load. The recogniser is checked against vLLM 0.32's own option list run
through argparse itself."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.inventory.secretoptions import (
    SECRET_OPTION_WORDS, VLLM_OPTIONS_WITH_A_SECRET_WORD, is_secret_option, secret_options,
)
from tests.unit.test_plan_inventories import example_data

K = "Zq7v9Lm2Xc4Rt8Wb"          # a key of no recognisable shape: only its option gives it away
VLLM_OPTIONS = [line for line in (Path(__file__).parents[1] / "fixtures"
                                  / "vllm_serve_options_0.32.0.txt").read_text().splitlines()
                if line and not line.startswith("#")]
VLLM_SECRETS = {"--api-key", "--hf-token"}
CONTAINER = {"kind": "container", "runtime": "podman",
             "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1"}


def write(tmp_path: Path, edit) -> Path:
    data = example_data()
    edit(data["all"]["vars"], data["all"]["children"]["ascend"]["hosts"])
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refusal(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    error = caught.value
    assert error.exit_code == 2 and error.line is not None
    assert K not in str(error) and "\n" not in str(error)
    return error


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# (extra_args, index of the item the error names, the option as the message shows it)
REFUSED_ARGS = [
    (["--api-key", K], 0, "--api-key"),
    ([f"--api-key={K}"], 0, "--api-key"),
    (["--api_key", K], 0, "--api_key"),
    ([f"--api_key={K}"], 0, "--api_key"),
    (["--api-k", K], 0, "--api-k"),
    ([f"--api-ke={K}"], 0, "--api-ke"),
    ([f"--api_ke={K}"], 0, "--api_ke"),
    (["--API-KEY", K], 0, "--API-KEY"),
    ([f"--Api_Key={K}"], 0, "--Api_Key"),
    ([f"--api-key {K}"], 0, "--api-key"),                  # one item holding a space
    (["--seed", "1", f"--enforce-eager --api-key {K}"], 2, "--api-key"),
    (["--api-key ", K], 0, "--api-key"),
    (["--api", K], 0, "--api"),                            # ambiguous in vLLM 0.32, still argv
    (["--a", K], 0, "--a"),
    (["--hf-token", K], 0, "--hf-token"),
    (["--hf_t", K], 0, "--hf_t"),
    ([f"--hf-to={K}"], 0, "--hf-to"),
    (["-api-key", K], 0, "-api-key"),
    (["--x-auth-token", K], 0, "--x-auth-token"),
    ([f"--db_password={K}"], 0, "--db_password"),
    (["--hf-overrides.token", K], 0, "--hf-overrides.token"),
    (["--api-key", 1234567890], 0, "--api-key"),
    (["--port", "8000", "--api-key", K, "--seed", "1"], 2, "--api-key"),
]


@pytest.mark.parametrize("args,index,shown", REFUSED_ARGS,
                         ids=[" ".join(map(str, a)).replace(K, "K") for a, _, _ in REFUSED_ARGS])
def test_secret_option_in_extra_args_is_refused(tmp_path, args, index, shown):
    path = write(tmp_path, lambda v, h: v["serving"].update(extra_args=args))
    error = refusal(path)
    assert error.field == f"all.vars.serving.extra_args[{index}]"
    assert f"a secret option ({shown})" in str(error)
    assert error.line == line_of(path, "extra_args:") + 1 + index


def container(variables, options):
    variables["serving"].pop("engine", None)     # with a container it is engine.command
    variables["engine"] = {**CONTAINER, "options": options}


# (where, edit, the field named, the message)
PLACES = [
    ("engine.options", lambda v, h: container(v, ["--label=a=b", "--api-key", K]),
     "all.vars.engine.options[1]", "a secret option (--api-key)"),
    ("custom list", lambda v, h: v.update(custom={"launch": ["vllm", "serve", "--api-k", K]}),
     "all.vars.custom.launch[2]", "a secret option (--api-k)"),
    ("serving.env value", lambda v, h: v["serving"].update(
        env={"VLLM_EXTRA": f"--enforce-eager --api-key {K}"}),
     "all.vars.serving.env.VLLM_EXTRA", "a secret option (--api-key)"),
    ("host env value", lambda v, h: h["node0"].update(env={"OPTS": f"-x --hf_t {K}"}),
     "all.children.ascend.hosts.node0.env.OPTS", "a secret option (--hf_t)"),
    ("mapping key", lambda v, h: v["serving"].update(
        speculative_config={"method": "mtp", "--api-ke": K}),
     "all.vars.serving.speculative_config.--api-ke", "a literal value for --api-ke"),
]


@pytest.mark.parametrize("edit,field,message", [p[1:] for p in PLACES],
                         ids=[p[0] for p in PLACES])
def test_every_place_that_holds_an_argv_or_text_is_scanned(tmp_path, edit, field, message):
    error = refusal(write(tmp_path, edit))
    assert error.field == field and message in str(error)


@pytest.mark.parametrize("option", ["--label=token=abc", "--env=VLLM_API_KEY=abc",
                                    "--label=api_key=s3cr3t", '--label={"token": "abcd"}'])
def test_key_value_secrets_in_engine_options_are_refused_without_the_value(tmp_path, option):
    path = write(tmp_path, lambda v, h: container(v, [option]))
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    message = str(caught.value)
    assert caught.value.field == "all.vars.engine.options[0]"
    assert "key=value secret" in message
    assert option.split("=", 2)[-1].strip('"}') not in message


ACCEPTED_ARGS = [
    ["--api-server-count", "2"],
    ["--hf-config-path", "/srv/models/config"],
    ["--hf-overrides", '{"architectures": ["Qwen3ForCausalLM"]}'],
    ["--hf-token"],                                   # alone: vLLM uses the cached login
    ["--hf-token", "--seed", "1"],
    ["--max-num-batched-tokens", "4096", "--long-prefill-token-threshold", "64"],
    ["--tokenizer", "/srv/tokenizer", "--tokenizer-mode", "auto"],
    ["--allow-credentials", "--ssl-keyfile", "/etc/ascendctl/key.pem"],
    ["--enable-tokenizer-info-endpoint", "--api-key"],   # a bare --api-key holds no key
    ["--kv-cache-memory-bytes", "64M"],
]


@pytest.mark.parametrize("args", ACCEPTED_ARGS, ids=[" ".join(a) for a in ACCEPTED_ARGS])
def test_real_vllm_options_that_look_close_load(tmp_path, args):
    inv = load_inventory(write(tmp_path, lambda v, h: v["serving"].update(extra_args=args)),
                         check_files=False)
    assert inv.serving.extra_args == args


def test_engine_options_merely_containing_key_or_token_load(tmp_path):
    options = ["--label=monkey=1", "--workdir=/srv/keyboard", "--label=tokenizer=fast"]
    inv = load_inventory(write(tmp_path, lambda v, h: container(v, options)), check_files=False)
    assert inv.engine.options == options


def test_message_shows_a_bounded_excerpt_of_a_huge_option(tmp_path):
    option = "--" + "a" * 100_000 + "-token"
    error = refusal(write(tmp_path, lambda v, h: v["serving"].update(extra_args=[option, K])))
    assert "a secret option (--aaaa" in str(error) and len(str(error)) < 500


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


def vllm_parser() -> _Parser:
    """argparse with vLLM 0.32's serve options (allow_abbrev on, as vLLM leaves it)."""
    parser = _Parser(add_help=False)
    for option in VLLM_OPTIONS:
        parser.add_argument(option, nargs="?", dest=option.lstrip("-").replace("-", "_"))
    return parser


def as_vllm_reads(token: str) -> str:
    """FlexibleArgumentParser.parse_args's renaming: `_` to `-` before `=` and `.`."""
    if not token.startswith("--"):
        return token
    key, eq, value = token.partition("=")
    return re.sub(r"(?<=--)[^.]*", lambda m: m.group(0).replace("_", "-"), key, count=1) + eq + value


def spellings(option: str) -> set[str]:
    """Every prefix of a long option, with dashes or underscores."""
    found = set()
    for end in range(3, len(option) + 1):
        prefix = option[:end]
        found |= {prefix, "--" + prefix[2:].replace("-", "_")}
    return found


def test_refused_exactly_where_vllm_would_read_a_secret_option():
    """Every spelling vLLM 0.32 expands to --api-key or --hf-token is refused; no spelling
    it reads as another option is."""
    parser = vllm_parser()
    secret_dests = {o.lstrip("-").replace("-", "_") for o in VLLM_SECRETS}
    checked = 0
    for option in VLLM_OPTIONS:
        if not option.startswith("--"):
            assert not is_secret_option(option), option
            continue
        for spelling in spellings(option):
            try:
                parsed = vars(parser.parse_args([as_vllm_reads(spelling), "V"]))
            except _Refused:
                continue                    # ambiguous: vLLM exits (the argv is refused or not)
            dest = next(d for d, v in parsed.items() if v == "V")
            assert is_secret_option(spelling) == (dest in secret_dests), (spelling, dest)
            checked += 1
    assert checked > 5000
    # the shortest unique prefixes in vLLM 0.32, and the ambiguous ones refused anyway
    assert is_secret_option("--api-k") and is_secret_option("--hf_t")
    for ambiguous in ("--api", "--api-", "--hf", "--hf-", "--h", "--a"):
        with pytest.raises(_Refused):
            parser.parse_args([ambiguous, "V"])
        assert is_secret_option(ambiguous)


def test_no_complete_vllm_option_is_a_prefix_of_a_secret_one():
    """The premise of refusing every prefix: it never refuses a real option."""
    for option in VLLM_OPTIONS:
        if option not in VLLM_SECRETS:
            assert not any(secret.startswith(option) for secret in VLLM_SECRETS), option
            assert not is_secret_option(option), option


def test_the_options_with_a_secret_word_inside_are_vllm_s():
    words = SECRET_OPTION_WORDS
    assert VLLM_OPTIONS_WITH_A_SECRET_WORD == tuple(
        o[2:] for o in VLLM_OPTIONS if o.startswith("--") and any(w in o for w in words)
        and not o.endswith(words))


def test_a_value_is_the_next_word_unless_it_is_a_long_option():
    assert list(secret_options(["--hf-token", "--port", "8000"])) == []
    assert list(secret_options(["--hf-token", "-x"])) == [(0, "--hf-token")]
    assert list(secret_options(["--api-key="])) == [(0, "--api-key")]
    assert list(secret_options(["--seed", "1", None, "--api-key", {"env": "X"}])) == \
        [(3, "--api-key")]
