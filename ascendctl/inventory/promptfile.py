"""Reading a prompt set file, bounded: its entries with where each one is.

YAML goes through the inventory's bounded loader (ascendctl/inventory/yamlsrc.py: size,
depth, aliases, line of every key), after a count of its values by libyaml's event parser:
the bounded loader is pure Python, some 40 µs a value, so a file of tiny values is refused
before it is composed. JSONL: one JSON object per line, each line's nesting checked before
it is parsed, duplicate keys refused, one leading UTF-8 BOM skipped.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import MAX_DEPTH, json_depth, read_input_bytes
from ascendctl.inventory.secretscan import secret_kind
from ascendctl.inventory.yamlsrc import load_yaml_with_lines

if TYPE_CHECKING:
    from ascendctl.inventory.yamlsrc import SourceMap

MAX_YAML_BYTES = 256 << 10      # the bounded loader reads some 0.5 MiB a second
MAX_JSONL_BYTES = 2 << 20       # the secret scan reads some 3 MiB a second
MAX_YAML_VALUES = 10_000      # 1000 prompts of a few keys each, or fewer chats
MAX_ENTRIES = 1000
WHAT = "prompt set"
# keys that appear in a field as they are (short words); any other is shown quoted and bounded
PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,39}")
EntryPath = tuple[Any, ...]


@dataclass(frozen=True)
class Located:
    """One entry of a prompt file, with where it and everything in it is."""

    value: Any
    line: Optional[int]
    base: EntryPath = ()                      # the entry in the file: (index,) in YAML
    source: Optional["SourceMap"] = None      # YAML: the line of every key and item

    def line_at(self, path: EntryPath = ()) -> Optional[int]:
        if self.source is None or not path:
            return self.line
        return self.source.line_of(self.base + tuple(path))

    def field(self, path: EntryPath = ()) -> Optional[str]:
        return dotted(self.base + tuple(path)) or None


def dotted(path: EntryPath) -> str:
    parts: list[str] = []
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            parts.append(f"[{part}]")
        elif isinstance(part, str) and PLAIN_KEY.fullmatch(part):
            parts.append(("." if parts else "") + str(part))
        else:
            parts.append(f"[{short(part)}]")
    return "".join(parts)


def short(value: Any, limit: int = 40) -> str:
    """A bounded, one-line, escaped excerpt of a value for an error message."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def read_entries(path: Path) -> list[Located]:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".jsonl"):
        raise InputError("a prompt set is a .yaml, .yml or .jsonl file", file=str(path))
    return jsonl_entries(path) if suffix == ".jsonl" else yaml_entries(path)


# -- YAML -------------------------------------------------------------------------------------

def yaml_entries(path: Path) -> list[Located]:
    data, source = load_yaml_with_lines(
        path, max_bytes=MAX_YAML_BYTES, what=WHAT, max_values=MAX_YAML_VALUES,
        too_many=f"more than {MAX_YAML_VALUES} values: a YAML prompt set holds at most "
                 f"{MAX_YAML_VALUES} (a larger one can be JSONL)")
    if not isinstance(data, list):
        raise InputError("a YAML prompt set is a list of prompts (`- prompt: ...`)",
                         file=str(path), line=source.line_of(()))
    if len(data) > MAX_ENTRIES:
        raise InputError(f"{len(data)} prompts; at most {MAX_ENTRIES}", file=str(path))
    return [Located(entry, source.line_of((index,)), (index,), source)
            for index, entry in enumerate(data)]


# -- JSONL ------------------------------------------------------------------------------------

class DuplicateKey(ValueError):
    pass


def jsonl_entries(path: Path) -> list[Located]:
    data = read_input_bytes(path, limit=MAX_JSONL_BYTES, what=WHAT)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 (byte {err.start})", file=str(path),
                         line=data[:err.start].count(b"\n") + 1) from None
    entries: list[Located] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if len(entries) == MAX_ENTRIES:
            raise InputError(f"more than {MAX_ENTRIES} prompts", file=str(path), line=number)
        entries.append(Located(parse_jsonl_line(line, str(path), number), number))
    return entries


def parse_jsonl_line(line: str, file: str, number: int) -> Any:
    depth = json_depth(line)
    if depth > MAX_DEPTH:
        raise InputError(f"nested {depth} levels deep (at most {MAX_DEPTH})", file=file,
                         line=number)
    try:
        return json.loads(line, object_pairs_hook=_unique_keys,
                          parse_constant=_refuse_constant)
    except DuplicateKey as err:
        raise InputError(str(err), file=file, line=number) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not a JSON object: {err.msg} (column {err.colno})", file=file,
                         line=number) from None
    except (ValueError, RecursionError, OverflowError) as err:
        raise InputError(f"not a JSON object: {str(err)[:120]}", file=file,
                         line=number) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            shown = "(not shown: it looks like a secret)" if secret_kind(key) else short(key)
            raise DuplicateKey(f"duplicate key {shown}: JSON would keep only the last")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
