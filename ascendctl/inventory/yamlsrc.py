"""Load YAML while remembering where every value came from.

PyYAML's safe loader forgets line numbers and silently keeps the last of two
duplicate keys. Error messages must name file, line and field, and a duplicate host
or key is a mistake, so the document is composed into nodes and converted here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.excerpt import excerpt
from ascendctl.inventory.inputfile import read_input_text

YamlPath = tuple[Any, ...]


@dataclass
class SourceMap:
    """Line numbers (1-based) of every mapping key and sequence item, by path."""

    file: str
    lines: dict[YamlPath, int] = field(default_factory=dict)
    # the text of every value YAML read as a number, by path: `python: 3.10` is the
    # float 3.1, and a hint must show what was written
    numbers: dict[YamlPath, str] = field(default_factory=dict)

    def line_of(self, path: YamlPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


MAX_YAML_BYTES = 1 << 20        # an inventory is a few KiB
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 100_000       # after alias expansion: refuses alias bombs
# as written, counted by libyaml before the pure-Python composer runs (which costs ~10 µs
# a value): a large inventory (hundreds of hosts) holds a few thousand
MAX_WRITTEN_VALUES = 20_000
MAX_INT_DIGITS = 30
_MAX_INT_BITS = 100             # 10**30 < 2**100: also bounds 0x/0o/0b forms
# YAML 1.1 integer forms other than plain decimal, as PyYAML resolves them
_NON_DECIMAL_INTS = (
    (re.compile(r"[-+]?0b[0-1_]+"), "a binary number"),
    (re.compile(r"[-+]?0x[0-9a-fA-F_]+"), "a hexadecimal number"),
    (re.compile(r"[-+]?0[0-7_]+"), "an octal number (YAML 1.1 reads a leading 0 as octal)"),
    (re.compile(r"[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+"), "a base-60 number (YAML 1.1 reads "
                                                        "digits with ':' as minutes:seconds)"),
)
_NON_DECIMAL_FLOAT = re.compile(r".*[_:].*")
_PLAIN_KEY = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\[\]\ud800-\udfff]+")
PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def load_yaml_with_lines(path: Path, *, max_bytes: int = MAX_YAML_BYTES,
                         what: str = "YAML file", decimal_numbers: bool = False,
                         max_values: int = MAX_WRITTEN_VALUES,
                         too_many: str = "") -> tuple[Any, SourceMap]:
    """The one way a YAML file the operator gives us is read: a regular file of at most
    `max_bytes`, nesting at most MAX_YAML_DEPTH deep, at most MAX_YAML_VALUES values once
    aliases are expanded (each node is converted once and shared), integers of at most
    MAX_INT_DIGITS digits, every syntax or value error an InputError naming file and line.
    At most `max_values` values as written (`too_many`: what to say past it).
    `decimal_numbers`: refuse the YAML 1.1 number forms that are easily misread (octal
    `017500` is 8000, `1:20` is 80, `0x1F40`, `0b1`, `1_000`): numbers in decimal only."""
    source = SourceMap(file=str(path))
    text = read_input_text(path, limit=max_bytes, what=what)
    _count_written_values(text, str(path), max_values, too_many)
    root = _compose(text, str(path))
    if root is None:
        return None, source
    source.lines[()] = root.start_mark.line + 1
    _check_expanded_size(root, source.file)
    return _Converter(source, decimal_numbers).convert(root, ()), source


def load_yaml_data(path: Path, *, max_bytes: int = MAX_YAML_BYTES, what: str = "file") -> Any:
    """Like load_yaml_with_lines, for files whose line map nobody needs."""
    return load_yaml_with_lines(path, max_bytes=max_bytes, what=what)[0]


def _count_written_values(text: str, file: str, limit: int, too_many: str) -> None:
    """Refuse a document of more than `limit` values (scalars, collections and aliases, as
    written) before the pure-Python composer sees it: counted with libyaml's event parser
    (~1 µs a value) where PyYAML has it. A syntax error ends the count: the composer
    reports it, in its words, having read no more values than the count allowed."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    counted = (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)
    values = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, counted):
                values += 1
                if values > limit:
                    mark = event.start_mark
                    raise InputError(too_many or f"more than {limit} values", file=file,
                                     line=mark.line + 1 if mark else None)
    except (yaml.YAMLError, ValueError):
        pass
    finally:
        loader.dispose()


def _compose(text: str, file: str) -> Any:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):   # noqa: ANN001 (PyYAML's signature)
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    mark = self.peek_event().start_mark
                    raise InputError(f"nested more than {MAX_YAML_DEPTH} levels deep",
                                     file=file, line=mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = None
    try:
        loader = BoundedLoader(text)
        return loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        problem = err.problem or err.context or "invalid YAML"
        if err.context and err.context_mark and err.problem_mark \
                and err.context_mark.line != err.problem_mark.line:
            problem += f" ({err.context} that started on line {err.context_mark.line + 1})"
        raise InputError(f"YAML syntax error: {problem}", file=file, line=line) from None
    except yaml.reader.ReaderError as err:
        line = text[:err.position].count("\n") + 1
        code = err.character if isinstance(err.character, int) else ord(err.character)
        raise InputError(f"YAML error: character {code:#x} is not allowed "
                         "(control characters must be written as escapes in quotes)",
                         file=file, line=line) from None
    except yaml.YAMLError as err:
        raise InputError(f"YAML error: {str(err).splitlines()[0]}", file=file) from None
    except RecursionError:
        raise InputError("nested too deeply", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_expanded_size(root: Any, file: str) -> None:
    """Count the values the document holds with every alias expanded, without expanding
    (a memo per node: linear in the file). Refuse a document over MAX_YAML_VALUES and a
    recursive alias (a node that contains itself)."""
    import yaml

    sizes: dict[int, int] = {}
    # iterative post-order walk: (node, children pushed?)
    stack: list[tuple[Any, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            on_path.discard(key)
            children = _children(node)
            total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_YAML_VALUES:
                raise InputError(f"aliases expand to more than {MAX_YAML_VALUES} values "
                                 "(an alias bomb?)", file=file,
                                 line=node.start_mark.line + 1)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise InputError("a recursive alias (a value that contains itself)", file=file,
                             line=node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise InputError("a recursive alias (a value that contains itself)",
                                 file=file, line=child.start_mark.line + 1)
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


class _Converter:
    """Nodes to Python values, once per node (an alias shares the first conversion), and
    the line of every key and item reached without an alias."""

    def __init__(self, source: SourceMap, decimal_numbers: bool = False):
        import yaml

        self.source = source
        self.decimal_numbers = decimal_numbers
        self.scalars = yaml.SafeLoader("")
        self.done: dict[int, Any] = {}

    def convert(self, node: Any, path: YamlPath, *, is_key: bool = False) -> Any:
        key = id(node)
        if key in self.done:
            return self.done[key]
        value = self._convert(node, path, is_key)
        self.done[key] = value
        return value

    def _convert(self, node: Any, path: YamlPath, is_key: bool = False) -> Any:
        import yaml

        source = self.source
        if not isinstance(node, yaml.ScalarNode) and node.tag not in PLAIN_COLLECTION_TAGS:
            raise InputError(f"bad value: the tag {node.tag} is not supported",
                             file=source.file, line=node.start_mark.line + 1,
                             field=_dotted(path) or None)
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise InputError("YAML merge keys (<<) are not supported",
                                     file=source.file, line=key_node.start_mark.line + 1)
                key = self.convert(key_node, path, is_key=True)
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise InputError("mapping keys must be plain strings", file=source.file,
                                     line=key_node.start_mark.line + 1,
                                     field=_dotted(path) or None)
                key_path = path + (key,)
                line = key_node.start_mark.line + 1
                if key in result:
                    first = source.lines.get(key_path)
                    raise InputError(f"duplicate key {_short(key)} (first defined on line "
                                     f"{first})", file=source.file, line=line,
                                     field=_dotted(key_path))
                source.lines.setdefault(key_path, line)
                result[key] = self.convert(value_node, key_path)
            return result
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item_node in enumerate(node.value):
                source.lines.setdefault(path + (index,), item_node.start_mark.line + 1)
                items.append(self.convert(item_node, path + (index,)))
            return items
        value = self.scalar(node, path)
        if not is_key and isinstance(value, (int, float)) and not isinstance(value, bool):
            self.source.numbers[path] = node.value
        return value

    def scalar(self, node: Any, path: YamlPath) -> Any:
        import datetime

        line = node.start_mark.line + 1
        where = {"file": self.source.file, "line": line, "field": _dotted(path) or None}
        if node.tag == "tag:yaml.org,2002:int" and \
                sum(ch.isdigit() for ch in node.value) > MAX_INT_DIGITS:
            raise InputError(f"integer of more than {MAX_INT_DIGITS} digits", **where)
        try:
            value = self.scalars.construct_object(node, deep=True)
        except Exception as err:  # noqa: BLE001 - every constructor failure is bad input
            problem = getattr(err, "problem", None) or _reason(err)
            raise InputError(f"bad value: {problem}", **where) from None
        if isinstance(value, (datetime.date, datetime.datetime)):
            return value.isoformat()     # an unquoted date is text wherever it lands
        if isinstance(value, bytes):
            raise InputError("binary values are not supported", **where)
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > _MAX_INT_BITS:
                raise InputError(f"integer of more than {MAX_INT_DIGITS} digits", **where)
            if self.decimal_numbers:
                self.decimal_only(node.value, value, where)
        elif isinstance(value, float) and self.decimal_numbers \
                and _NON_DECIMAL_FLOAT.fullmatch(node.value):
            raise InputError(f"{excerpt(node.value)} is read by YAML 1.1 as {value!r}: write "
                             "numbers in plain decimal (no '_' or ':'), or quote text",
                             **where)
        return value

    @staticmethod
    def decimal_only(text: str, value: int, where: dict[str, Any]) -> None:
        for pattern, form in _NON_DECIMAL_INTS:
            if pattern.fullmatch(text):
                raise InputError(f"{excerpt(text)} is {form}, {value} in decimal: write numbers "
                                 "in plain decimal (no leading 0, 0x, 0b, '_' or ':'), or quote "
                                 "text", **where)
        if "_" in text:
            raise InputError(f"{excerpt(text)} is read by YAML 1.1 as {value}: write numbers "
                             "without '_', or quote text", **where)


def _reason(err: Exception) -> str:
    if isinstance(err, KeyError):
        return "not a value of its type"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:120]


_MAX_KEY_CHARS = 60


def _short(value: Any) -> str:
    return excerpt(value)


def _dotted(path: YamlPath) -> str:
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif len(str(part)) > _MAX_KEY_CHARS or not _PLAIN_KEY.fullmatch(str(part)):
            # a key with a newline or control character must not split the message line,
            # nor a long one make it unbounded
            parts.append(f"[{_short(str(part))}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


dotted = _dotted
