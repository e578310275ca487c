"""Prompt sets of the quality gate: a YAML list or a JSONL file on the jump host, or the
built-in set shipped with ascendctl, each prompt with an optional expected answer.

Every problem is reported as `file:line: field: message` (InputError) before any host is
contacted: unknown keys, a prompt that is neither text nor chat messages, two
expectations on one prompt, a regular expression that does not compile, duplicate ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from ascendctl.errors import InputError

ExpectKind = Literal["exact", "contains", "regex"]
EXPECT_KINDS: tuple[ExpectKind, ...] = ("exact", "contains", "regex")
PROMPT_KEYS = ("id", "prompt", "messages", "max_tokens") + EXPECT_KINDS
ROLES = ("system", "user", "assistant")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
MAX_PROMPTS = 1000
MAX_FILE_BYTES = 8 << 20
MAX_TOKENS_LIMIT = 4096
BUILTIN = "builtin"
BUILTIN_PACKAGE = "ascendctl.quality"
BUILTIN_FILE = "agreement_prompts.yaml"
# Prompts are text for the model: newlines and tabs are normal, other control bytes are
# a sign of a binary or mis-encoded file.
ALLOWED_CONTROLS = "\n\t\r"


@dataclass(frozen=True)
class Expectation:
    """What a prompt's greedy answer must be: the exact text, contain a substring, or
    match a regular expression (searched anywhere; anchor it with ^ and $)."""

    kind: ExpectKind
    value: str

    def matches(self, text: str) -> bool:
        if self.kind == "exact":
            return text == self.value
        if self.kind == "contains":
            return self.value in text
        return re.search(self.value, text) is not None

    def describe(self) -> str:
        return f"{self.kind} {json.dumps(self.value, ensure_ascii=False)}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class QualityPrompt:
    id: str
    prompt: Optional[str] = None                        # /v1/completions
    messages: Optional[tuple[ChatMessage, ...]] = None  # /v1/chat/completions
    expect: Optional[Expectation] = None
    max_tokens: Optional[int] = None                    # None: slo.quality.max_tokens
    line: Optional[int] = None

    def request(self, default_max_tokens: int) -> dict[str, Any]:
        """What the node sends for this prompt (no expectation: it does not change the
        answer)."""
        body: dict[str, Any] = {"id": self.id,
                                "max_tokens": self.max_tokens or default_max_tokens}
        if self.messages is not None:
            body["messages"] = [{"role": m.role, "content": m.content} for m in self.messages]
        else:
            body["prompt"] = self.prompt
        return body

    def shown(self, limit: int = 80) -> str:
        text = self.prompt if self.messages is None else self.messages[-1].content
        return truncate(text or "", limit)


@dataclass(frozen=True)
class PromptSet:
    source: str                         # the file, or "builtin"
    prompts: tuple[QualityPrompt, ...]

    def requests(self, default_max_tokens: int) -> list[dict[str, Any]]:
        return [p.request(default_max_tokens) for p in self.prompts]

    def digest(self, default_max_tokens: int) -> str:
        """Identifies what the model is asked (prompts, ids and token limits): two gate
        runs with the same digest can be compared token by token."""
        canonical = json.dumps(self.requests(default_max_tokens), sort_keys=True,
                               ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def by_id(self, prompt_id: str) -> QualityPrompt:
        return next(p for p in self.prompts if p.id == prompt_id)


def truncate(text: str, limit: int) -> str:
    flat = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


# -- reading ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Located:
    """One entry of a prompt file, with where it and each of its keys are."""

    value: Any
    line: Optional[int]
    prefix: str                                    # the field prefix in messages: "[3]"
    key_lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, key: str) -> Optional[int]:
        return self.key_lines.get(key, self.line)


def load_prompt_file(path: Union[str, Path], *, require_expectations: bool) -> PromptSet:
    """Read and validate a prompt set (.yaml/.yml: a list of entries; .jsonl: one JSON
    object per line)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".jsonl"):
        raise InputError("a prompt set is a .yaml, .yml or .jsonl file", file=str(path))
    try:
        size = path.stat().st_size
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=str(path)) from None
    if size > MAX_FILE_BYTES:
        raise InputError(f"{size} bytes; a prompt set is at most {MAX_FILE_BYTES >> 20} MiB",
                         file=str(path))
    entries = _jsonl_entries(path) if suffix == ".jsonl" else _yaml_entries(path)
    return _build(str(path), entries, require_expectations)


def builtin_prompt_set() -> PromptSet:
    """The prompt set shipped with ascendctl (no expected answers: for agreement)."""
    from ascendctl.paths import package_data

    path = package_data(BUILTIN_PACKAGE) / "data" / BUILTIN_FILE
    loaded = load_prompt_file(path, require_expectations=False)
    return PromptSet(source=BUILTIN, prompts=loaded.prompts)


def _yaml_entries(path: Path) -> list[Located]:
    from ascendctl.inventory.yamlsrc import load_yaml_with_lines

    data, source = load_yaml_with_lines(path)
    if not isinstance(data, list):
        raise InputError("a YAML prompt set is a list of prompts (`- prompt: ...`)",
                         file=str(path), line=source.line_of(()))
    return [Located(entry, source.line_of((index,)), f"[{index}]",
                    {str(key): source.lines[(index, key)] for key in entry
                     if (index, key) in source.lines} if isinstance(entry, dict) else {})
            for index, entry in enumerate(data)]


def _jsonl_entries(path: Path) -> list[Located]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8: {err.reason}", file=str(path)) from None
    entries: list[Located] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            entries.append(Located(json.loads(line), number, ""))
        except ValueError as err:
            raise InputError(f"not a JSON object: {err}", file=str(path), line=number) from None
    return entries


def _build(source: str, entries: list[Located], require_expectations: bool) -> PromptSet:
    if not entries:
        raise InputError("the prompt set is empty", file=source)
    if len(entries) > MAX_PROMPTS:
        raise InputError(f"{len(entries)} prompts; at most {MAX_PROMPTS}", file=source)
    prompts: list[QualityPrompt] = []
    seen: dict[str, Optional[int]] = {}
    for number, entry in enumerate(entries, start=1):
        prompt = _prompt(source, entry, number, require_expectations)
        if prompt.id in seen:
            raise _fail(source, entry.line_of("id"), _field(entry.prefix, "id"),
                        f"duplicate id {prompt.id!r} (first on line {seen[prompt.id]})")
        seen[prompt.id] = entry.line
        prompts.append(prompt)
    return PromptSet(source=source, prompts=tuple(prompts))


def _fail(source: str, line: Optional[int], field: str, message: str) -> InputError:
    return InputError(message, file=source, line=line, field=field or None)


def _field(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _prompt(source: str, located: Located, number: int,
            require_expectations: bool) -> QualityPrompt:
    entry, prefix = located.value, located.prefix

    def fail(key: str, message: str) -> InputError:
        return _fail(source, located.line_of(key) if key else located.line,
                     _field(prefix, key) if key else prefix, message)

    if not isinstance(entry, dict):
        raise fail("", "each prompt is a mapping with `prompt` (or `messages`) and an "
                       "expected answer")
    for key in entry:
        if key not in PROMPT_KEYS:
            raise fail(str(key), f"unknown key {key!r} (valid: {', '.join(PROMPT_KEYS)})")
    prompt_id = entry.get("id", f"prompt-{number}")
    if not isinstance(prompt_id, str) or not ID_RE.fullmatch(prompt_id):
        raise fail("id", "use letters, digits and . _ : - (at most 64, starting with a "
                         "letter or digit)")
    if ("prompt" in entry) == ("messages" in entry):
        raise fail("", "give exactly one of `prompt` (text for /v1/completions) or "
                       "`messages` (a chat for /v1/chat/completions)")
    text = messages = None
    if "prompt" in entry:
        text = _text(entry["prompt"], lambda m: fail("prompt", m))
    else:
        messages = _messages(entry["messages"], lambda m: fail("messages", m))
    kinds = [kind for kind in EXPECT_KINDS if kind in entry]
    if len(kinds) > 1:
        raise fail(kinds[1], f"give one expected answer, not both {kinds[0]} and {kinds[1]}")
    if not kinds and require_expectations:
        raise fail("", "no expected answer: add `exact`, `contains` or `regex`")
    expect = None
    if kinds:
        kind = kinds[0]
        value = entry[kind]
        if not isinstance(value, str):
            raise fail(kind, f"must be text, not {type(value).__name__} (quote it)")
        if kind == "contains" and not value:
            raise fail(kind, "an empty substring matches every answer")
        if kind == "regex":
            try:
                re.compile(value)
            except re.error as err:
                raise fail(kind, f"bad regular expression: {err}") from None
        expect = Expectation(kind, value)
    max_tokens = entry.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(
            max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT):
        raise fail("max_tokens", f"must be a whole number from 1 to {MAX_TOKENS_LIMIT}")
    return QualityPrompt(id=prompt_id, prompt=text, messages=messages, expect=expect,
                         max_tokens=max_tokens, line=located.line)


Fail = Callable[[str], InputError]


def _text(value: Any, fail: Fail) -> str:
    if not isinstance(value, str) or not value:
        raise fail("must be non-empty text")
    if any((ord(ch) < 32 and ch not in ALLOWED_CONTROLS) or ord(ch) == 127 for ch in value):
        raise fail("must not contain control characters (other than newline and tab)")
    return value


def _messages(value: Any, fail: Fail) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise fail("must be a non-empty list of {role, content}")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise fail(f"[{index}] must be a mapping of exactly `role` and `content`")
        if message["role"] not in ROLES:
            raise fail(f"[{index}].role {message['role']!r} is not one of {', '.join(ROLES)}")
        def content_fail(reason: str, i: int = index) -> InputError:
            return fail(f"[{i}].content {reason}")

        messages.append(ChatMessage(message["role"], _text(message["content"], content_fail)))
    return tuple(messages)
