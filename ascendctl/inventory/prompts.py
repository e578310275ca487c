"""Prompt sets of the quality gate: a YAML list or a JSONL file on the jump host, or the
built-in set shipped with ascendctl, each prompt with an optional expected answer.

Every problem is reported as `file:line: field: message` (InputError) before any host is
contacted: unknown keys, a prompt that is neither text nor chat messages, two
expectations on one prompt, a regular expression that does not compile (or is too long or
nested too deep), duplicate ids, a literal secret, terminal control characters. Reading
the file, bounded, is promptfile.py; searching the regular expressions, prompt_regex.py.
Read with the inventory (slo.quality names the file); the gate (ascendctl/quality/) uses
the loaded set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from ascendctl.errors import InputError
from ascendctl.inventory.prompt_regex import RegexSearcher, pattern_problem
from ascendctl.inventory.promptfile import Located, read_entries, short
from ascendctl.inventory.secretscan import secret_kind
from ascendctl.paths import package_data


ExpectKind = Literal["exact", "contains", "regex"]
EXPECT_KINDS: tuple[ExpectKind, ...] = ("exact", "contains", "regex")
PROMPT_KEYS = ("id", "prompt", "messages", "max_tokens") + EXPECT_KINDS
ROLES = ("system", "user", "assistant")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
MAX_MESSAGES = 256
MAX_TOKENS_LIMIT = 4096
BUILTIN = "builtin"
BUILTIN_PACKAGE = "ascendctl.inventory"
BUILTIN_FILE = "agreement_prompts.yaml"
# What no prompt or expected answer may hold: control characters other than newline, tab
# and carriage return (ESC and the C1 set drive the terminal a report is printed on), the
# bidirectional overrides and isolates (they reorder what it shows) and lone surrogates
# (not text: they cannot even be encoded).
FORBIDDEN_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e"
                             "\u2066-\u2069\ud800-\udfff]")
SHOWN_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


@dataclass(frozen=True)
class Expectation:
    """What a prompt's greedy answer must be: the exact text, contain a substring, or
    match a regular expression (searched anywhere; anchor it with ^ and $)."""

    kind: ExpectKind
    value: str

    def matches(self, text: str, searcher: Optional[RegexSearcher] = None) -> bool:
        """Whether TEXT is what was expected. A regex is searched by SEARCHER (one for a
        whole gate; by default one for this call), within its deadline: MatchUndecided
        when it gives no answer."""
        if self.kind == "exact":
            return text == self.value
        if self.kind == "contains":
            return self.value in text
        if searcher is not None:
            return searcher.search(self.value, text)
        with RegexSearcher() as own:
            return own.search(self.value, text)

    def describe(self) -> str:
        return f"{self.kind} {printable(json.dumps(self.value, ensure_ascii=False))}"

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
    # where its own max_tokens is written (an error about it names the prompt file)
    max_tokens_line: Optional[int] = field(default=None, compare=False)
    max_tokens_field: str = field(default="max_tokens", compare=False)

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


def printable(text: str) -> str:
    """TEXT as one line that shows on a terminal as it is: newline, tab and carriage return
    as \\n \\t \\r, anything else that is not printable (ESC, C1 controls, bidirectional
    controls, lone surrogates, ...) as \\xNN or \\uNNNN."""
    return "".join(ch if ch.isprintable() else SHOWN_ESCAPES.get(ch) or _escape(ch)
                   for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def truncate(text: str, limit: int) -> str:
    """At most LIMIT characters of printable(TEXT), … marking a cut."""
    flat = printable(text[:limit])         # escaping only lengthens: the rest is cut anyway
    return flat if len(text) <= limit and len(flat) <= limit else flat[:limit - 1] + "…"


def check_token_limits(prompt_set: PromptSet, default_max_tokens: int, max_model_len: int,
                       set_limit_error: Callable[[str], InputError]) -> None:
    """Refuse token limits the engine would reject (max_tokens >= max_model_len): a
    prompt's own names its line in the prompt file, the set's (slo.quality.max_tokens) is
    SET_LIMIT_ERROR's (the inventory's line)."""
    for prompt in prompt_set.prompts:
        wanted = prompt.max_tokens or default_max_tokens
        if wanted < max_model_len:
            continue
        message = (f"max_tokens {wanted} leaves no room for the prompt in "
                   f"serving.max_model_len {max_model_len}")
        if prompt.max_tokens:
            raise InputError(f"{message} (prompt {prompt.id})", file=prompt_set.source,
                             line=prompt.max_tokens_line, field=prompt.max_tokens_field)
        raise set_limit_error(message)


# -- reading ----------------------------------------------------------------------------------

def prompt_file_path(value: Optional[str]) -> Optional[str]:
    """A prompt file named in the inventory: a safe path (model._safe_path's rules),
    absolute (or ~/...), normalised."""
    if value is None:
        return None
    from ascendctl.inventory import validators

    validators.path(value)
    expanded = os.path.expanduser(value)
    if not os.path.isabs(expanded):
        raise ValueError("give an absolute path (or ~/...): a relative one would "
                         "depend on the directory ascendctl runs in")
    return os.path.normpath(expanded)


def load_prompt_file(path: Union[str, Path], *, require_expectations: bool) -> PromptSet:
    """Read and validate a prompt set (.yaml/.yml: a list of entries; .jsonl: one JSON
    object per line)."""
    path = Path(path)
    return _build(str(path), read_entries(path), require_expectations)


def builtin_prompt_set() -> PromptSet:
    """The prompt set shipped with ascendctl (no expected answers: for agreement)."""
    path = package_data(BUILTIN_PACKAGE) / "data" / BUILTIN_FILE
    loaded = load_prompt_file(path, require_expectations=False)
    return PromptSet(source=BUILTIN, prompts=loaded.prompts)


def _build(source: str, entries: list["Located"], require_expectations: bool) -> PromptSet:
    if not entries:
        raise InputError("the prompt set is empty", file=source)
    prompts: list[QualityPrompt] = []
    seen: dict[str, Optional[int]] = {}
    for number, entry in enumerate(entries, start=1):
        prompt = _Entry(source, entry).prompt(number, require_expectations)
        if prompt.id in seen:
            raise InputError(f"duplicate id {prompt.id!r} (first on line {seen[prompt.id]})",
                             file=source, line=entry.line_at(("id",)),
                             field=entry.field(("id",)))
        seen[prompt.id] = entry.line
        prompts.append(prompt)
    return PromptSet(source=source, prompts=tuple(prompts))


class _Entry:
    """Validation of one entry; every error names the file, the line and the field."""

    def __init__(self, source: str, located: "Located"):
        self.source, self.located = source, located

    def fail(self, path: tuple[Any, ...], message: str) -> InputError:
        return InputError(message, file=self.source, line=self.located.line_at(path),
                          field=self.located.field(path))

    def prompt(self, number: int, require_expectations: bool) -> QualityPrompt:
        # first, so that no later message can echo a pasted key
        self.refuse_secrets()
        entry = self.located.value
        if not isinstance(entry, dict):
            raise self.fail((), "each prompt is a mapping with `prompt` (or `messages`) and "
                                "an expected answer")

        for key in entry:
            if key not in PROMPT_KEYS:
                raise self.fail((key,), f"unknown key {short(key)} (valid: "
                                        f"{', '.join(PROMPT_KEYS)})")
        prompt_id = entry.get("id", f"prompt-{number}")
        if not isinstance(prompt_id, str) or not ID_RE.fullmatch(prompt_id):
            raise self.fail(("id",), "use letters, digits and . _ : - (at most 64, starting "
                                     "with a letter or digit)")
        if ("prompt" in entry) == ("messages" in entry):
            raise self.fail((), "give exactly one of `prompt` (text for /v1/completions) or "
                                "`messages` (a chat for /v1/chat/completions)")
        text = messages = None
        if "prompt" in entry:
            text = self.text(("prompt",), entry["prompt"])
        else:
            messages = self.messages(entry["messages"])
        max_tokens = entry.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(
                max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT):
            raise self.fail(("max_tokens",), f"must be a whole number from 1 to "
                                             f"{MAX_TOKENS_LIMIT}")
        return QualityPrompt(id=prompt_id, prompt=text, messages=messages,
                             expect=self.expectation(entry, require_expectations),
                             max_tokens=max_tokens, line=self.located.line,
                             max_tokens_line=self.located.line_at(("max_tokens",)),
                             max_tokens_field=self.located.field(("max_tokens",)) or "")

    def refuse_secrets(self) -> None:
        """Every key and text in the entry, in file order, through the inventory's secret
        scanner: a gate record keeps the prompts and reports print them."""
        stack: list[tuple[tuple[Any, ...], Any]] = [((), self.located.value)]
        while stack:
            path, value = stack.pop()
            if isinstance(value, str):
                kind = secret_kind(value)
                if kind:
                    raise self.fail(path, f"{kind} in a prompt set (the value is not shown): "
                                          "gate records keep every prompt and expected "
                                          "answer, and reports print them")
            elif isinstance(value, dict):
                for key in value:
                    kind = secret_kind(key) if isinstance(key, str) else None
                    if kind:
                        raise self.fail(path, f"a key that looks like {kind} (not shown)")
                stack.extend((path + (key,), item) for key, item in reversed(value.items()))
            elif isinstance(value, list):
                stack.extend((path + (index,), value[index])
                             for index in range(len(value) - 1, -1, -1))

    def text(self, path: tuple[Any, ...], value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, "must be non-empty text")
        self.refuse_characters(path, value)
        return value

    def refuse_characters(self, path: tuple[Any, ...], value: str) -> None:
        found = FORBIDDEN_CHARS.search(value)
        if found is None:
            return
        code = ord(found.group())
        what = ("a lone surrogate, which is not text" if 0xD800 <= code <= 0xDFFF else
                "a bidirectional control, which reorders what a terminal shows"
                if code >= 0x202A else
                "a control character: newline, tab and carriage return are the ones allowed")
        raise self.fail(path, f"must not contain U+{code:04X} (character "
                              f"{found.start() + 1}), {what}")

    def messages(self, value: Any) -> tuple[ChatMessage, ...]:
        path: tuple[Any, ...] = ("messages",)
        if not isinstance(value, list) or not value:
            raise self.fail(path, "must be a non-empty list of {role, content}")
        if len(value) > MAX_MESSAGES:
            raise self.fail(path, f"{len(value)} messages; at most {MAX_MESSAGES}")

        messages = []
        for index, message in enumerate(value):
            here = path + (index,)
            if not isinstance(message, dict) or set(message) != {"role", "content"}:
                raise self.fail(here, "must be a mapping of exactly `role` and `content`")
            role = message["role"]
            if role not in ROLES:
                raise self.fail(here + ("role",), f"{short(role)} is not one of "
                                                  f"{', '.join(ROLES)}")
            messages.append(ChatMessage(role, self.text(here + ("content",),
                                                        message["content"])))
        return tuple(messages)

    def expectation(self, entry: dict[str, Any],
                    require_expectations: bool) -> Optional[Expectation]:
        kinds = [kind for kind in EXPECT_KINDS if kind in entry]
        if len(kinds) > 1:
            raise self.fail((kinds[1],), f"give one expected answer, not both {kinds[0]} and "
                                         f"{kinds[1]}")
        if not kinds:
            if require_expectations:
                raise self.fail((), "no expected answer: add `exact`, `contains` or `regex`")
            return None
        kind = kinds[0]
        value = entry[kind]
        if not isinstance(value, str):
            raise self.fail((kind,), f"must be text, not {type(value).__name__} (quote it)")
        self.refuse_characters((kind,), value)
        if kind == "contains" and not value:
            raise self.fail((kind,), "an empty substring matches every answer")
        if kind == "regex":
            problem = pattern_problem(value)
            if problem:
                raise self.fail((kind,), problem)
        return Expectation(kind, value)
