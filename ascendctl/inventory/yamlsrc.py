"""Load YAML while remembering where every value came from.

PyYAML's safe loader forgets line numbers and silently keeps the last of two
duplicate keys. Error messages must name file, line and field, and a duplicate host
or key is a mistake, so the document is composed into nodes and converted here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError

YamlPath = tuple[Any, ...]


@dataclass
class SourceMap:
    """Line numbers (1-based) of every mapping key and sequence item, by path."""

    file: str
    lines: dict[YamlPath, int] = field(default_factory=dict)

    def line_of(self, path: YamlPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


def load_yaml_with_lines(path: Path) -> tuple[Any, SourceMap]:
    import yaml

    source = SourceMap(file=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read: {err}", file=str(path)) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        problem = err.problem or err.context or "invalid YAML"
        if err.context and err.context_mark and err.problem_mark \
                and err.context_mark.line != err.problem_mark.line:
            problem += f" ({err.context} that started on line {err.context_mark.line + 1})"
        raise InputError(f"YAML syntax error: {problem}", file=str(path), line=line) from None
    except yaml.YAMLError as err:
        raise InputError(f"YAML error: {err}", file=str(path)) from None
    if root is None:
        return None, source
    source.lines[()] = root.start_mark.line + 1
    scalar_loader = yaml.SafeLoader("")
    return _convert(root, (), source, scalar_loader), source


def _convert(node: Any, path: YamlPath, source: SourceMap, scalar_loader: Any) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError("YAML merge keys (<<) are not supported",
                                 file=source.file, line=key_node.start_mark.line + 1)
            key = _convert(key_node, path, source, scalar_loader)
            if not isinstance(key, (str, int)):
                raise InputError("mapping keys must be plain strings", file=source.file,
                                 line=key_node.start_mark.line + 1,
                                 field=_dotted(path))
            key_path = path + (key,)
            line = key_node.start_mark.line + 1
            if key in result:
                first = source.lines.get(key_path)
                raise InputError(f"duplicate key {key!r} (first defined on line {first})",
                                 file=source.file, line=line, field=_dotted(key_path))
            source.lines[key_path] = line
            result[key] = _convert(value_node, key_path, source, scalar_loader)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item_node in enumerate(node.value):
            source.lines[path + (index,)] = item_node.start_mark.line + 1
            items.append(_convert(item_node, path + (index,), source, scalar_loader))
        return items
    try:
        return scalar_loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as err:
        raise InputError(f"bad value: {err.problem}", file=source.file,
                         line=node.start_mark.line + 1, field=_dotted(path)) from None


def _dotted(path: YamlPath) -> str:
    parts: list[str] = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


dotted = _dotted
