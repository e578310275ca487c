"""Per-name lab index allocation: several labs (different --name) coexist on one host,
each with its own subnets 198.18.<index>.0/24 and 198.19.<index>.0/24 and interface
names. The registry is a JSON file guarded by an exclusive lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator

from ascendctl.errors import InputError
from ascendctl_lab import paths

MAX_INDEX = 250
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


def validate_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InputError(f"invalid lab name {name!r}: use 1-31 lower-case letters, digits "
                         "and '-', starting with a letter", field="--name")
    return name


@contextlib.contextmanager
def _locked() -> Iterator[dict]:
    path = paths.registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except json.JSONDecodeError:
            data = {}
        data.setdefault("labs", {})
        yield data
        tmp = str(path) + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
        os.replace(tmp, path)


def allocate(name: str) -> int:
    """The lab's index, allocating the lowest free one the first time."""
    validate_name(name)
    with _locked() as data:
        labs = data["labs"]
        if name in labs:
            return int(labs[name]["index"])
        used = {int(v["index"]) for v in labs.values()}
        for index in range(1, MAX_INDEX + 1):
            if index not in used:
                labs[name] = {"index": index}
                return index
    raise InputError(f"no free lab index: {MAX_INDEX} labs exist already", field="--name")


def lookup(name: str) -> int | None:
    with _locked() as data:
        entry = data["labs"].get(name)
        return int(entry["index"]) if entry else None


def release(name: str) -> None:
    with _locked() as data:
        data["labs"].pop(name, None)
