"""The fact API: a fact is one object holding the command that reads it and its pure parser.

A fact is declared once, in the module that holds its parser, and nowhere else:

    UNAME = Fact("uname", command="uname -srm", parse=parse_uname)

The gather script runs the commands of every registered fact (`registry.all_facts()`:
every fact created at the top level of a module of this package), and `NodeFacts` holds
the value of each: `facts[UNAME]` is what `parse` returned for that host's output
(typed: the parser's return type, or None when the command failed; the reason is then in
`facts.problems`).

Three kinds:

- `Fact[T]`: one command per host.
- `KeyedFact[K, T]`: one command per key (per NPU, per RoCE port, per ping target);
  its value is `((key, parsed), ...)` for the keys whose output parsed.
- `Derived[V]`: no command of its own; computed from other facts by a pure function of
  the `Reading` (e.g. the RoCE ports from the eight `hccn_tool` outputs of each port).

Everything here is standard-library Python: the node runtime ships this package.
docs/extending.md walks through adding a fact and a check over it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, Iterable, Mapping, Optional, Tuple, TypeVar, Union

if TYPE_CHECKING:
    from ascendctl.facts.params import GatherParams

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)

# a shell exit status that says the command itself is missing (not found / not executable)
NOT_FOUND_RC = (126, 127)

Command = Union[str, Callable[["GatherParams"], Optional[str]], None]


@dataclass(frozen=True)
class Section:
    """What one command printed on the node: one section of the gather output."""

    name: str
    stdout: str
    stderr: str
    rc: int

    @property
    def text(self) -> str:
        """stdout and stderr together (npu-smi may print its errors on either)."""
        if self.stderr.strip():
            return self.stdout + ("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
        return self.stdout


def _defining_module() -> str:
    # the module whose top level creates the fact: frame 0 is this helper, 1 the
    # constructor, 2 its caller (the same trick as collections.namedtuple)
    return sys._getframe(2).f_globals.get("__name__", "__main__")


class FactBase(Generic[V_co]):
    """What every kind of fact has: a name (the key in `NodeFacts`, in `ascendctl facts
    --json` and under tests/facts/) and how to compute its value from a `Reading`."""

    name: str
    listed: bool                # shown in `NodeFacts.to_dict()` / `ascendctl facts --json`
    module: str                 # the module that defines it

    def commands(self, params: "GatherParams") -> list[tuple[str, str]]:
        """(section name, shell command) pairs this fact adds to the gather script."""
        return []

    def compute(self, reading: "Reading") -> V_co:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _Parsed(FactBase[V_co]):
    """A fact whose value comes from parsing command output (one command or one per key)."""

    parse: Callable[[str], object]
    section: str
    reads_stderr: bool
    check_rc: bool
    none_when_blank: bool
    ping_round: bool

    def _set_parsing(self, name: str, parse: Callable[[str], object], section: str | None,
                     reads_stderr: bool, check_rc: bool, none_when_blank: bool, listed: bool,
                     ping_round: bool, module: str) -> None:
        self.name = name
        self.parse = parse
        self.section = section or name
        self.reads_stderr = reads_stderr
        self.check_rc = check_rc
        self.none_when_blank = none_when_blank
        self.listed = listed
        self.ping_round = ping_round
        self.module = module


class Fact(_Parsed[Optional[T]]):
    """A fact read by one command per host.

    name           the fact's name (`facts.<name>`, JSON key, tests/facts/<name>/)
    command        the shell command (bash; `NPU_SMI_TOOL`/`HCCN_TOOL` name the Ascend
                   tools), or a function of the `GatherParams` returning it (None: not
                   run for these parameters), or None: printed by the gather script itself
    parse          pure function: the command's output -> the value
    section        the section name in the gather output (default: the name)
    reads_stderr   parse stdout and stderr together (npu-smi prints errors on either)
    check_rc       a non-zero exit with no output is a problem (False: parse what came back)
    none_when_blank  blank output means "nothing here": the value is None, no problem
    default        the value when there is none (e.g. `()` for a parser returning a tuple)
    listed         shown in `NodeFacts.to_dict()` (False for inputs of a `Derived` fact)
    ping_round     also run in the ping-only second round trip
    """

    def __init__(self, name: str, *, command: Command, parse: Callable[[str], T],
                 section: str | None = None, reads_stderr: bool = False, check_rc: bool = True,
                 none_when_blank: bool = False, default: object = None, listed: bool = True,
                 ping_round: bool = False, module: str | None = None) -> None:
        self._set_parsing(name, parse, section, reads_stderr, check_rc, none_when_blank,
                          listed, ping_round, module or _defining_module())
        self.command = command
        self.default = default

    def commands(self, params: "GatherParams") -> list[tuple[str, str]]:
        command = self.command(params) if callable(self.command) else self.command
        return [] if command is None else [(self.section, command)]

    def compute(self, reading: "Reading") -> T | None:
        sec = reading.section(self)
        value = None if sec is None else reading.parse(self, sec)
        return self.default if value is None else value  # type: ignore[return-value]


class KeyedFact(_Parsed[Tuple[Tuple[K, T], ...]], Generic[K, T]):
    """A fact read by one command per key: per NPU (`0`), per NPU and chip (`(0, 1)`), per
    RoCE port, per ping target (`(port, ip)`). Section `<section>:<key parts joined by :>`.

    keys      function of the `GatherParams`: the keys to run the command for
    command   function (key, params) -> the shell command for that key
    arity     how many `:`-separated parts a key has (1: a bare int or str)
    (the other arguments as for `Fact`)
    """

    def __init__(self, name: str, *, keys: Callable[["GatherParams"], Iterable[K]],
                 command: Callable[[K, "GatherParams"], str], parse: Callable[[str], T],
                 section: str | None = None, arity: int = 1, reads_stderr: bool = False,
                 check_rc: bool = True, none_when_blank: bool = False, listed: bool = True,
                 ping_round: bool = False, module: str | None = None) -> None:
        self._set_parsing(name, parse, section, reads_stderr, check_rc, none_when_blank,
                          listed, ping_round, module or _defining_module())
        self.keys = keys
        self.command = command
        self.arity = arity

    def section_of(self, key: K) -> str:
        parts = key if isinstance(key, tuple) else (key,)
        return ":".join((self.section, *(str(p) for p in parts)))

    def key_of(self, section: str) -> K | None:
        """The key of one of this fact's sections (None: not one of its sections)."""
        if not section.startswith(self.section + ":"):
            return None
        parts = section[len(self.section) + 1:].split(":", self.arity - 1)
        if len(parts) != self.arity or not all(parts):
            return None
        values = tuple(int(p) if p.isdigit() else p for p in parts)
        return values[0] if self.arity == 1 else values  # type: ignore[return-value]

    def commands(self, params: "GatherParams") -> list[tuple[str, str]]:
        return [(self.section_of(k), self.command(k, params)) for k in self.keys(params)]

    def compute(self, reading: "Reading") -> tuple[tuple[K, T], ...]:
        return tuple((k, v) for k, v, _ in reading.each(self) if v is not None)


class Derived(FactBase[V]):
    """A fact computed from other facts (no command of its own).

    compute   pure function of the `Reading`: `reading[OTHER]` is another fact's value,
              `reading.section(F)` / `reading.sections(F)` a command's raw output,
              `reading.sent_at` / `received_at` the controller's clock around the round trip
    """

    def __init__(self, name: str, compute: Callable[["Reading"], V], *, listed: bool = True,
                 module: str | None = None) -> None:
        self.name = name
        self._compute = compute
        self.listed = listed
        self.module = module or _defining_module()

    def compute(self, reading: "Reading") -> V:
        return self._compute(reading)


class Reading:
    """One host's gather output being turned into facts: parses each fact once, on demand,
    and notes what went wrong (`problems`: (section, what); `missing`: sections whose
    command is not installed)."""

    def __init__(self, sections: Mapping[str, Section], *, host: str = "",
                 sent_at: float | None = None, received_at: float | None = None) -> None:
        self.host = host
        self.sent_at = sent_at
        self.received_at = received_at
        self.problems: list[tuple[str, str]] = []
        self.missing: list[str] = []
        self.recording = True       # off: values only (for facts no listed fact reads)
        self._sections = sections
        self._values: dict[str, object] = {}
        self._each: dict[str, tuple] = {}
        self._busy: set[str] = set()

    def __getitem__(self, fact: FactBase[V]) -> V:
        if fact.name in self._values:
            return self._values[fact.name]  # type: ignore[return-value]
        if fact.name in self._busy:
            raise RuntimeError(f"fact {fact.name!r} depends on itself")
        self._busy.add(fact.name)
        try:
            value = fact.compute(self)
        finally:
            self._busy.discard(fact.name)
        self._values[fact.name] = value
        return value

    @property
    def values(self) -> dict[str, object]:
        return dict(self._values)

    def section(self, fact: Fact) -> Section | None:
        """The raw output of a one-command fact (None: not in this gather)."""
        return self._sections.get(fact.section)

    def sections(self, fact: KeyedFact[K, T]) -> tuple[tuple[K, Section], ...]:
        """The raw output for each key of a keyed fact, in section-name order."""
        out = []
        for name in sorted(self._sections):
            key = fact.key_of(name)
            if key is not None:
                out.append((key, self._sections[name]))
        return tuple(out)

    def each(self, fact: KeyedFact[K, T]) -> tuple[tuple[K, T | None, Section], ...]:
        """(key, parsed value or None, raw output) for every key of a keyed fact."""
        if fact.name not in self._each:
            self._each[fact.name] = tuple((k, self.parse(fact, sec), sec) for k, sec in self.sections(fact))
        return self._each[fact.name]

    def parse(self, fact: _Parsed, sec: Section):
        """`fact.parse` over one section, or None with the reason noted."""
        if sec.rc in NOT_FOUND_RC:
            self._note(sec.name, f"command not found (rc={sec.rc}): {sec.stderr.strip()[:200]}", missing=True)
            return None
        body = sec.text if fact.reads_stderr else sec.stdout
        if fact.none_when_blank and not body.strip():
            return None
        if fact.check_rc and sec.rc != 0 and not body.strip():
            self._note(sec.name, f"rc={sec.rc}: {(sec.stderr or sec.stdout).strip()[:200]}")
            return None
        try:
            return fact.parse(body)
        except Exception as err:  # a parser rejecting unexpected output is a fact, not a crash
            self._note(sec.name, f"unparseable output: {err}")
            return None

    def _note(self, section: str, what: str, missing: bool = False) -> None:
        if not self.recording:
            return
        if missing:
            self.missing.append(section)
        self.problems.append((section, what))
