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
from typing import Any, Callable, Dict, Tuple, Type, TypeVar

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
    """KEY holds a value of the wrong type, or (raised by a Record's validate()) of the
    right type but unusable."""

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
            record = _decoder(cls)(data, "")
            record.validate()
        except InvalidField as err:
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


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "an object", type(None): "null"}


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _got(value: Any) -> str:
    return _type_name(value) if value is None else f"{_type_name(value)} {excerpt(value)}"


# One decoder per type, built once: (value, key) -> the value as the type holds it, or
# InvalidField naming the key.
Decoder = Callable[[Any, str], Any]
_DECODERS: Dict[Any, Decoder] = {}


def _decoder(hint: Any) -> Decoder:
    found = _DECODERS.get(hint)
    if found is None:
        found = _DECODERS[hint] = _build(hint)
    return found


def _build(hint: Any) -> Decoder:
    if hint is Any:
        return lambda value, key: value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record_decoder(hint)
    if hint in _SCALARS:
        return _scalar_decoder(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"only Optional[X] unions are supported, not {hint!r}")
        return _optional_decoder(_decoder(inner[0]))
    if origin is typing.Literal:
        return _literal_decoder(args)
    if origin is list:
        return _list_decoder(_decoder(args[0]))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple_decoder(_decoder(args[0]))
    if origin is tuple:
        return _pair_decoder(tuple(_decoder(arg) for arg in args))
    if origin is dict:
        return _dict_decoder(_decoder(args[1]))
    raise TypeError(f"unsupported field type {hint!r}")


_SCALARS: Dict[type, Tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float),
                                          str: (str,)}


def _scalar_decoder(hint: type) -> Decoder:
    accepted, expected = _SCALARS[hint], _TYPE_NAMES[hint]

    def decode(value: Any, key: str) -> Any:
        if type(value) not in accepted:     # exact: a boolean is no integer
            raise InvalidField(key, f"expected {expected}, got {_got(value)}")
        # JSON has one kind of number: 5 is a float field's 5.0
        return float(value) if hint is float else value
    return decode


def _optional_decoder(inner: Decoder) -> Decoder:
    return lambda value, key: None if value is None else inner(value, key)


def _literal_decoder(allowed: Tuple[Any, ...]) -> Decoder:
    spelled = ", ".join(json.dumps(choice) for choice in allowed)

    def decode(value: Any, key: str) -> Any:
        if not any(type(value) is type(choice) and value == choice for choice in allowed):
            raise InvalidField(key, f"must be one of {spelled}, got {excerpt(value)}")
        return value
    return decode


def _require(value: Any, kind: type, key: str) -> None:
    if type(value) is not kind:
        raise InvalidField(key, f"expected {_TYPE_NAMES[kind]}, got {_type_name(value)}")


def _list_decoder(inner: Decoder) -> Decoder:
    def decode(value: Any, key: str) -> Any:
        _require(value, list, key)
        return [inner(item, f"{key}[{i}]") for i, item in enumerate(value)]
    return decode


def _tuple_decoder(inner: Decoder) -> Decoder:
    def decode(value: Any, key: str) -> Any:
        _require(value, list, key)
        return tuple(inner(item, f"{key}[{i}]") for i, item in enumerate(value))
    return decode


def _pair_decoder(inners: Tuple[Decoder, ...]) -> Decoder:
    def decode(value: Any, key: str) -> Any:
        _require(value, list, key)
        if len(value) != len(inners):
            raise InvalidField(key, f"expected a list of {len(inners)}, got {len(value)} item(s)")
        return tuple(inner(item, f"{key}[{i}]")
                     for i, (inner, item) in enumerate(zip(inners, value)))
    return decode


def _dict_decoder(inner: Decoder) -> Decoder:
    def decode(value: Any, key: str) -> Any:
        _require(value, dict, key)
        return {name: inner(item, f"{key}.{name}") for name, item in value.items()}
    return decode


def _record_decoder(cls: type) -> Decoder:
    fields = {item.name: item for item in dataclasses.fields(cls)}
    required = [name for name, item in fields.items()
                if item.default is dataclasses.MISSING
                and item.default_factory is dataclasses.MISSING]
    decoders: Dict[str, Decoder] = {}      # filled on first use: a record may nest itself

    def decode(value: Any, prefix: str) -> Any:
        if type(value) is not dict:
            raise InvalidField(prefix, f"expected an object, got {_type_name(value)}")
        if not decoders:
            hints = typing.get_type_hints(cls)
            decoders.update((name, _decoder(hints[name])) for name in fields)
        unknown = sorted(str(key) for key in value if key not in fields)
        if unknown:
            near = difflib.get_close_matches(unknown[0], list(fields), n=1)
            raise InvalidField(_join(prefix, unknown[0][:EXCERPT_CHARS]), "unknown key" +
                            (f" (did you mean {near[0]}?)" if near else ""))
        for name in required:
            if name not in value:
                raise InvalidField(_join(prefix, name), "missing")
        return cls(**{name: decoders[name](item, _join(prefix, name))
                      for name, item in value.items()})
    return decode
