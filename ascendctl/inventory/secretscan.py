"""Refuse literal secrets anywhere in the inventory.

An API key belongs in `serving.api_key: {env: VAR}` or `{file: /path}`; a literal key in
`serving.env`, in `extra_args`, in a host's env or in custom variables would land in a
0644 file, in the engine's argv (visible in `ps` to every user of the node) and in
`inventory show`. The scan runs on the raw document before any other validation, so no
later error message can echo a secret; its own messages name the field, never the value.

It looks at every key name (`VLLM_API_KEY: ...`), every value's shape (`sk-...`, a URL
password, `token=...`) and every argv: the words of every list (`serving.extra_args`,
`engine.options`, any custom list) and of every string, where a secret option with a
value is refused in each spelling vLLM's parser reads (secretoptions.py). The work is
linear in the size of the document, whatever its values hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ascendctl.inventory.secretoptions import (
    is_secret_option, secret_option_in_text, secret_options, shown_option,
)
from ascendctl.inventory.yamlsrc import YamlPath

# Words that make a key name a secret's name (the name split at _ - . and case changes).
SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "passphrase", "apikey",
                          "credential", "credentials", "bearer", "authorization"})
# ...unless the name says it holds where the secret is (TOKEN_FILE, api_key_env).
LOCATION_SUFFIXES = frozenset({"file", "path", "dir", "env", "var", "ref"})
SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"),
                          ("auth", "key"), ("private", "key"), ("client", "secret")})
# Fields that name a secret's *location*, not the secret.
LOCATION_FIELDS = frozenset({"private_key", "ansible_ssh_private_key_file"})
# Values that look like a credential whatever their key: (kind, the literal the pattern
# starts with, pattern, matched against the lowercased value?). Each pattern is linear in the length of the value: it starts at a
# literal (`sk-`, `bearer`, `eyJ`, `://`, a secret word), a boundary is checked by a
# fixed-width lookbehind placed after that literal, and every run of characters either
# ends the pattern or is followed by a character the run cannot hold, so a failed attempt
# costs only its own run and two attempts never scan the same run
# (tests/unit/test_secret_scan_linear.py). Lowercasing the value first, instead of
# re.IGNORECASE, keeps the word alternations fast.
_KEY_WORDS = ("api_key", "api-key", "apikey", "access_key", "access-key", "accesskey",
              "token", "secret", "password", "passwd", "passphrase")
SECRET_VALUES = (
    ("an OpenAI-style key (sk-…)", ("sk-",),
     re.compile(r"sk-(?<![A-Za-z0-9_]sk-)[A-Za-z0-9_-]{16,}"), False),
    ("a bearer token", ("bearer",),
     re.compile(r"bearer(?<![a-z0-9_]bearer)[ \t]+[a-z0-9._~+/=-]{8,}"), True),
    ("a JSON web token", ("eyJ",),
     re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."), False),
    ("a Hugging Face token", ("hf_",),
     re.compile(r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}"), False),
    ("a GitHub token", ("gh", "github_pat_"), re.compile(
        r"gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{30,}"
        r"|github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{30,}"), False),
    ("an AWS access key", ("AKIA",),
     re.compile(r"AKIA(?<![A-Za-z0-9_]AKIA)[0-9A-Z]{16}(?![A-Za-z0-9_])"), False),
    # the scheme is only checked as the one character before `://`: matched as a run
    # `[a-z][a-z0-9+.-]*` it would restart at every letter of a long word
    ("a password in a URL", ("://",),
     re.compile(r"://(?<=[A-Za-z0-9+.-]://)[^/?#\s:@]+:[^/?#\s@]+@"), False),
    ("a private key", ("-----BEGIN ",),
     re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"), False),
    # a name that ends with a secret word, the word not glued to a letter or digit before
    # it (`token=`, `x_api_key: `, `"token": "`, `--label=token=`), then a value of 3 or
    # more characters
    ("a key=value secret", ("key", "token", "secret", "passw"), re.compile(
        "(?:" + "|".join(re.escape(w) + f"(?<![a-z0-9]{re.escape(w)})" for w in _KEY_WORDS)
        + r")[\"']?[ \t]*[=:][ \t]*[\"']?[^\s\"']{3,}"), True),
)


def name_words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_secret_name(name: str) -> bool:
    if name in LOCATION_FIELDS:
        return False
    words = name_words(name)
    if words and words[-1] in LOCATION_SUFFIXES:
        return False
    if any(w in SECRET_WORDS for w in words):
        return True
    return any((a, b) in SECRET_PAIRS for a, b in zip(words, words[1:])) or \
        any(w.endswith("apikey") for w in words)


def secret_kind(value: str) -> str | None:
    """What secret `value` holds, by its shape (never looking at a key name), or None."""
    folded = value.lower()
    for kind, literals, pattern, lowercased in SECRET_VALUES:
        subject = folded if lowercased else value
        if any(literal in subject for literal in literals) and pattern.search(subject):
            return kind
    return None


def is_reference(value: Any) -> bool:
    """`{env: VAR}` or `{file: PATH}`: where a secret comes from, not the secret."""
    return isinstance(value, dict) and bool(value) and set(value) <= {"env", "file"}


def find_secret(data: Any, path: YamlPath = ()) -> tuple[YamlPath, str] | None:
    """The first literal secret in `data` (in document order): (where, what kind), or None."""
    for where, kind in _scan(data, path):
        return where, kind
    return None


class _Found(str):
    """A finding pushed on the scan's stack, so that it comes out in document order."""


def _scan(data: Any, path: YamlPath) -> Iterator[tuple[YamlPath, str]]:
    # (value, where, whether it is an item of a list, whose words were looked at as argv)
    stack: list[tuple[Any, YamlPath, bool]] = [(data, path, False)]
    while stack:
        value, where, argv_item = stack.pop()
        if isinstance(value, _Found):
            yield where, str(value)
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                key_text = str(key)
                here = where + (key,)
                if key_text == "api_key" and where[-1:] == ("serving",):
                    if isinstance(item, dict):
                        stack.append((item, here, False))   # its values still must not be keys
                    elif item is not None:
                        stack.append((_Found("a literal API key"), here, False))
                    continue
                if (is_secret_name(key_text) or is_secret_option(key_text)) \
                        and _is_literal(item):
                    stack.append((_Found(f"a literal value for {shown_option(key_text)}"),
                                  here, False))
                    continue
                stack.append((item, here, False))
                stack.append((key_text, here, False))     # a key can be pasted text too
        elif isinstance(value, list):
            options = dict(secret_options(value))   # argv: the words across the items
            for index in range(len(value) - 1, -1, -1):
                if index in options:
                    stack.append((_Found(f"a secret option ({options[index]})"),
                                  where + (index,), False))
                else:
                    stack.append((value[index], where + (index,), True))
        elif isinstance(value, str):
            kind = secret_kind(value)
            option = None if kind or argv_item else secret_option_in_text(value)
            if kind or option:
                yield where, kind or f"a secret option ({option})"


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, bool) or is_reference(value):
        return False
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, (int, float))
