"""Read a `vllm serve` argv the way a given vLLM's parser reads it.

FlexibleArgumentParser (vllm/utils/argparse_utils.py) turns `_` into `-` in a long
option's name (before `=` and before the first `.`), rewrites `-O3` to
`--optimization-level 3`, folds `--json-arg.key value` into `--json-arg`, and argparse
(allow_abbrev on) expands a unique prefix of a long option. Anything else that starts
with `-` and is no option of that vLLM (also an ambiguous prefix, or one argv item holding
a space: argparse takes it for a positional) ends `vllm serve` with a usage error.
Names are case-sensitive. The name normalisation is the secret-option recogniser's
(ascendctl/inventory/secretoptions.py).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ascendctl.drift.schema import ReleaseOptions
from ascendctl.inventory.secretoptions import option_parts, shown_option

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
SHOWN_CANDIDATES = 4


@dataclass(frozen=True)
class Option:
    index: int              # position in the argv
    written: str            # the option as written, without its value (bounded)
    resolved: str | None    # the option string vLLM resolves it to, None if none
    problem: str | None     # why vLLM refuses it ("unknown", "ambiguous: ...", "space")
    value: str | None       # the value given with `=` or as the next item


def read_options(argv: Sequence[str], options: ReleaseOptions) -> Iterator[Option]:
    """Every option item of `argv` (values and positionals are skipped)."""
    for index, item in enumerate(argv):
        if item == "--":
            return
        if not item.startswith("-") or NEGATIVE_NUMBER.match(item):
            continue
        value = item.partition("=")[2] if "=" in item else (
            argv[index + 1] if index + 1 < len(argv) and not argv[index + 1].startswith("-")
            else None)
        shown = shown_option(item)
        if any(ch.isspace() for ch in item.partition("=")[0]):
            yield Option(index, shown, None, "space", value)
        elif item.startswith("--"):
            yield _long(index, item, shown, value, options)
        else:
            yield _short(index, item, shown, value, options)


def _long(index: int, item: str, shown: str, value: str | None,
          options: ReleaseOptions) -> Option:
    parts = option_parts(item)
    assert parts is not None
    name = "--" + parts[0]
    written_name = item.partition("=")[0].partition(".")[0]
    if written_name.replace("_", "-") != name:     # option_parts lower-cases; vLLM does not
        return Option(index, shown, None, "unknown", value)
    if name in options.flags:
        return Option(index, shown, name, None, value)
    if options.abbrev:
        matches = _with_prefix(options.long_flags, name)
        if len(matches) == 1:
            return Option(index, shown, matches[0], None, value)
        if matches:
            listed = ", ".join(matches[:SHOWN_CANDIDATES])
            more = f" and {len(matches) - SHOWN_CANDIDATES} more" \
                if len(matches) > SHOWN_CANDIDATES else ""
            return Option(index, shown, None, f"ambiguous: it abbreviates {listed}{more}",
                          value)
    return Option(index, shown, None, "unknown", value)


def _with_prefix(ordered: tuple[str, ...], prefix: str) -> list[str]:
    start = bisect.bisect_left(ordered, prefix)
    matches = []
    for flag in ordered[start:]:
        if not flag.startswith(prefix):
            break
        matches.append(flag)
    return matches


def _short(index: int, item: str, shown: str, value: str | None,
           options: ReleaseOptions) -> Option:
    name = item.partition("=")[0]
    if options.dash_o and item.startswith("-O"):
        return Option(index, shown, "--optimization-level", None, value)
    if name in options.flags:
        return Option(index, shown, name, None, value)
    # a one-letter short option with its value attached (`-q8`)
    attached = [f for f in options.letter_flags if name.startswith(f)]
    if len(attached) == 1:
        return Option(index, shown, attached[0], None, item[2:])
    return Option(index, shown, None, "unknown", value)


def additional_configs(argv: Sequence[str], options: ReleaseOptions
                       ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, mapping) of every `--additional-config` value in `argv` that parses as a
    JSON object, and of every `--additional-config.key value` (as {key: value})."""
    for option in read_options(argv, options):
        if option.resolved != "--additional-config" or option.value is None:
            continue
        keys = option_parts(argv[option.index])
        dotted = keys[2] if keys else ""
        if dotted:
            yield option.index, {dotted.split(".")[0]: option.value}
            continue
        try:
            parsed = json.loads(option.value)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            yield option.index, parsed
