"""Strict JSON for the dataclasses of the controller-node contract (standard library only).

A `Record` dataclass is written by `to_json()` (its fields in declaration order, two-space
indent, one final newline) and read back by `from_json(text, source)`, which refuses what
a node must not guess about: a key that is no field, a missing field without a default, a
value of another type (`true` is no int, `1` is a float, a list stays a list), a value its
`validate()` rejects. The error names the file and the key (`ranks[1].units[0]`).

Field types are spelled with `typing` (List, Optional, Tuple, ...) so that the node's
Python (3.8 and later) can evaluate them.
"""

import dataclasses
import difflib
import json
import typing
from typing import Any, Dict, Tuple, Type, TypeVar

# field(metadata=OMIT_WHEN_NONE): the key is left out while its value is None
OMIT_WHEN_NONE = {"omit_when_none": True}
EXCERPT_CHARS = 40

R = TypeVar("R", bound="Record")


class ContractError(ValueError):
    """A contract file that cannot be used: names the file, the key and what is wrong."""

    def __init__(self, source: str, key: str, reason: str):
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {reason}" if where else reason)
        self.source, self.key, self.reason = source, key, reason


class InvalidField(ValueError):
    """Raised by a Record's validate(): KEY holds a value of the right type that is wrong."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason


def excerpt(value: Any) -> str:
    """A short, bounded rendering of a bad value for an error message."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


class Record:
    """Mixin of the contract's dataclasses."""

    def validate(self) -> None:
        """Raise InvalidField for a value the type allows but the node cannot use."""

    def to_dict(self) -> Dict[str, Any]:
        return _encode(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls: Type[R], data: Any, source: str = "") -> R:
        try:
            record = _decode_record(cls, data, "")
            record.validate()
        except InvalidField as err:
            raise ContractError(source, err.key, err.reason) from None
        except _Mismatch as err:
            raise ContractError(source, err.key, err.reason) from None
        return record

    @classmethod
    def from_json(cls: Type[R], text: "str | bytes", source: str = "") -> R:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ContractError(source, "", f"not JSON ({err})") from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls: Type[R], path: str) -> R:
        """The record in file PATH (OSError when it cannot be read, else ContractError)."""
        with open(path, "rb") as handle:
            return cls.from_json(handle.read(), path)


class _Mismatch(Exception):
    def __init__(self, key: str, reason: str):
        super().__init__(key, reason)
        self.key, self.reason = key, reason


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {}
        for item in dataclasses.fields(value):
            inner = getattr(value, item.name)
            if inner is None and item.metadata.get("omit_when_none"):
                continue
            data[item.name] = _encode(inner)
        return data
    if isinstance(value, (list, tuple)):
        return [_encode(inner) for inner in value]
    if isinstance(value, dict):
        return {key: _encode(inner) for key, inner in value.items()}
    return value


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "an object", type(None): "null"}


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _decode_record(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise _Mismatch(prefix, f"expected an object, got {_type_name(data)}")
    fields = {item.name: item for item in dataclasses.fields(cls)}
    unknown = sorted(str(key) for key in data if key not in fields)
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(fields), n=1)
        raise _Mismatch(_join(prefix, unknown[0][:EXCERPT_CHARS]), "unknown key" +
                        (f" (did you mean {near[0]}?)" if near else ""))
    hints = _hints(cls)
    values = {}
    for name, item in fields.items():
        key = _join(prefix, name)
        if name not in data:
            if item.default is dataclasses.MISSING and \
                    item.default_factory is dataclasses.MISSING:
                raise _Mismatch(key, "missing")
            continue
        values[name] = _decode(hints[name], data[name], key)
    return cls(**values)


def _decode(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is typing.Union:
        if value is None:
            if type(None) in args:
                return None
            raise _Mismatch(key, "must not be null")
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"{key}: only Optional[X] unions are supported")
        return _decode(inner[0], value, key)
    if origin is typing.Literal:
        if value not in args or isinstance(value, bool) != isinstance(args[0], bool):
            raise _Mismatch(key, f"must be one of {', '.join(json.dumps(a) for a in args)}, "
                                 f"got {excerpt(value)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _Mismatch(key, f"expected a list, got {_type_name(value)}")
        if origin is list:
            return [_decode(args[0], inner, f"{key}[{i}]") for i, inner in enumerate(value)]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], inner, f"{key}[{i}]") for i, inner in enumerate(value))
        if len(value) != len(args):
            raise _Mismatch(key, f"expected a list of {len(args)}, got {len(value)} item(s)")
        return tuple(_decode(arg, inner, f"{key}[{i}]")
                     for i, (arg, inner) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch(key, f"expected an object, got {_type_name(value)}")
        return {name: _decode(args[1], inner, f"{key}.{name}") for name, inner in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_record(hint, value, key)
    return _decode_scalar(hint, value, key)


_SCALARS: Dict[type, Tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float),
                                          str: (str,)}


def _decode_scalar(hint: Any, value: Any, key: str) -> Any:
    accepted = _SCALARS.get(hint)
    if accepted is None:
        raise TypeError(f"{key}: unsupported field type {hint!r}")
    if not isinstance(value, accepted) or (isinstance(value, bool) and hint is not bool):
        got = _type_name(value) if value is None else f"{_type_name(value)} {excerpt(value)}"
        raise _Mismatch(key, f"expected {_TYPE_NAMES[hint]}, got {got}")
    if hint is float:
        return float(value)     # JSON has one kind of number: 5 is a float field's 5.0
    return value

