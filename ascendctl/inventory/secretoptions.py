"""Recognise a command-line option that carries a secret the way vLLM's parser reads it.

vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) turns `_` into `-` in the
name of every `--` option (the part before `=` and before the first `.`), and, being an
argparse parser with `allow_abbrev` left on, expands any unique prefix of a long option:
`--api_key K`, `--api-k K` and `--api-ke=K` all set `--api-key`. An option vLLM does not
know (`--API-KEY K`, `--api K` where it is ambiguous, one argv item `"--api-key K"`) makes
vLLM exit with a usage error, but only after the value was written into engine.json and
shown by `ps`: those are refused as well.

Refused, whatever the case and the `_`/`-` spelling:
- every prefix of vLLM's secret options (`--a` ... `--api-key`, `--h` ... `--hf-token`).
  vLLM 0.32's `vllm serve` has 430 option strings; there `--api-k` and `--hf-t` are the
  shortest unique prefixes (`--api` could also be `--api-server-count`, `--hf` also
  `--hf-config-path` or `--hf-overrides`), but another vLLM version may make a shorter
  prefix unique, so every prefix is refused. None of them is a complete option of vLLM
  0.32 (tests/fixtures/vllm_serve_options_0.32.0.txt, checked by
  tests/unit/test_secret_options.py);
- any option whose name ends with a secret word (`--x-api-key`, `--db-password`,
  `--auth-token`, `-token`), unless it abbreviates a vLLM option with the word inside
  (`--dbo-decode-token` is `--dbo-decode-token-threshold`), and a dotted JSON key that is
  a secret's name (`--hf-overrides.token K` is `--hf-overrides '{"token": "K"}'` to vLLM).

An option carries a value when it is written `--opt=V`, or when the next argv token is not
itself a long option (`--hf-token` alone, "use the cached login", is accepted).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

# vLLM serve's options whose value is a secret (vLLM 0.32: the API keys, the HF token)
VLLM_SECRET_OPTIONS = ("api-key", "hf-token")
_LONGEST = max(len(option) for option in VLLM_SECRET_OPTIONS)
SECRET_OPTION_WORDS = ("apikey", "api-key", "token", "secret", "password", "passwd",
                       "passphrase")
SECRET_OPTION_NAME = re.compile(r"(?:[a-z0-9]+-)*(?:" + "|".join(SECRET_OPTION_WORDS) + ")")
# vLLM 0.32's options with a secret word inside their name, not at its end: a prefix of one
# that ends at the word (`--dbo-decode-token`, `--max-num-batched-token`) is that option to
# vLLM, not a secret
VLLM_OPTIONS_WITH_A_SECRET_WORD = (
    "dbo-decode-token-threshold", "dbo-prefill-token-threshold",
    "enable-prompt-tokens-details", "enable-tokenizer-info-endpoint",
    "long-prefill-token-threshold", "long-prefill-token-threshold-adaptive",
    "max-num-batched-tokens", "max-num-queued-tokens", "max-num-scheduled-tokens",
    "no-enable-prompt-tokens-details", "no-enable-tokenizer-info-endpoint",
    "no-long-prefill-token-threshold-adaptive", "no-return-tokens-as-token-ids",
    "no-skip-tokenizer-init", "no-tokens-only", "return-tokens-as-token-ids",
    "skip-tokenizer-init", "spec-tokens", "tokenizer", "tokenizer-mode",
    "tokenizer-revision", "tokens-only")
# how much of an option's name an error message shows
SHOWN = 40


def option_parts(token: str) -> tuple[str, bool, str] | None:
    """(name as vLLM compares it, long option?, dotted keys) for an option token; None when
    the token is not an option."""
    if not token.startswith("-"):
        return None
    name = token.lstrip("-").partition("=")[0]
    name, _dot, keys = name.partition(".")
    return name.replace("_", "-").lower(), token.startswith("--"), keys


@lru_cache(maxsize=4096)
def is_secret_option(token: str) -> bool:
    """Whether vLLM (or any tool with such an option) would take this option's value as a
    secret. `token` is one argv item or one whitespace-separated word of one."""
    parts = option_parts(token)
    if parts is None:
        return False
    name, long, keys = parts
    if not name:
        return False
    if long and len(name) <= _LONGEST and any(o.startswith(name) for o in VLLM_SECRET_OPTIONS):
        return True
    if _ends_with_secret_word(name) and not (
            long and any(o.startswith(name) for o in VLLM_OPTIONS_WITH_A_SECRET_WORD)):
        return True
    return _ends_with_secret_word(keys.rsplit(".", 1)[-1].replace("_", "-").lower())


def _ends_with_secret_word(name: str) -> bool:
    return name.endswith(SECRET_OPTION_WORDS) and SECRET_OPTION_NAME.fullmatch(name) is not None


def shown_option(token: str) -> str:
    """The option as written, without its value, cut to a short excerpt."""
    written = token.partition("=")[0]
    return written if len(written) <= SHOWN else written[:SHOWN] + "…"


def _tokens(items: Sequence[Any]) -> list[tuple[int, str]]:
    """(index of the item, word) for every whitespace-separated word of every string
    item; any other item is one word (a value), None (an empty item) none."""
    words: list[tuple[int, str]] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            words += [(index, word) for word in item.split()]
        elif isinstance(item, (dict, list)):
            words.append((index, "{...}"))
        elif item is not None:
            words.append((index, str(item)))
    return words


def secret_options(items: Sequence[Any]) -> Iterator[tuple[int, str]]:
    """(index of the item, the option as written) for every secret option in an argv-like
    list that carries a value, in order."""
    words = _tokens(items)
    for position, (index, word) in enumerate(words):
        if not is_secret_option(word):
            continue
        following = words[position + 1][1] if position + 1 < len(words) else None
        inline = "=" in word
        if inline or (following is not None and not following.startswith("--")):
            yield index, shown_option(word)


def secret_option_in_text(text: str) -> str | None:
    """The first secret option with a value among the words of one string, as written."""
    if "-" not in text:
        return None
    for _index, option in secret_options([text]):
        return option
    return None
