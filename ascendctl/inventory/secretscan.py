"""Refuse literal secrets anywhere in the inventory.

An API key belongs in `serving.api_key: {env: VAR}` or `{file: /path}`; a literal key in
`serving.env`, in `extra_args`, in a host's env or in custom variables would land in a
0644 file, in the engine's argv (visible in `ps` to every user of the node) and in
`inventory show`. The scan runs on the raw document before any other validation, so no
later error message can echo a secret; its own messages name the field, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

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
# Option names that carry a secret as their value (vLLM: --api-key; generic others).
SECRET_OPTIONS = re.compile(r"--?(?:[a-z0-9]+-)*(?:api-?key|token|secret|password|passwd)"
                            r"(?:=.*)?", re.IGNORECASE)
# Values that look like a credential whatever their key.
SECRET_VALUES = (
    ("an OpenAI-style key (sk-…)", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("a bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("an AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("a password in a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@",
                                       re.IGNORECASE)),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a key=value secret", re.compile(
        r"(?:^|[\s,;&?])(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|token|secret|password|passwd)"
        r"\s*[=:]\s*\S{4,}", re.IGNORECASE)),
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
    for kind, pattern in SECRET_VALUES:
        if pattern.search(value):
            return kind
    return None


def is_reference(value: Any) -> bool:
    """`{env: VAR}` or `{file: PATH}`: where a secret comes from, not the secret."""
    return isinstance(value, dict) and bool(value) and set(value) <= {"env", "file"}


def find_secret(data: Any, path: YamlPath = ()) -> tuple[YamlPath, str] | None:
    """The first literal secret in `data`: (where, what kind), or None."""
    for where, kind in _scan(data, path):
        return where, kind
    return None


def _scan(data: Any, path: YamlPath) -> Iterator[tuple[YamlPath, str]]:
    stack: list[tuple[Any, YamlPath]] = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                key_text = str(key)
                here = where + (key,)
                if key_text == "api_key" and where[-1:] == ("serving",):
                    if isinstance(item, dict):
                        stack.append((item, here))   # its values still must not be keys
                    elif item is not None:
                        yield here, "a literal API key"
                    continue
                if is_secret_name(key_text) and _is_literal(item):
                    yield here, f"a literal value for {key_text}"
                    continue
                stack.append((item, here))
        elif isinstance(value, list):
            for index in range(len(value) - 1, -1, -1):
                item = value[index]
                if isinstance(item, str) and SECRET_OPTIONS.fullmatch(item.strip()):
                    has_value = "=" in item or (index + 1 < len(value)
                                                and isinstance(value[index + 1], (str, int)))
                    if has_value:
                        yield where + (index,), f"a secret option ({item.split('=')[0]})"
                        continue
                stack.append((item, where + (index,)))
        elif isinstance(value, str):
            kind = secret_kind(value)
            if kind:
                yield where, kind


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, bool) or is_reference(value):
        return False
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, (int, float))
