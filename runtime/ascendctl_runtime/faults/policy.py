"""The fault policy table: each fault code or signal → an action, after its persistence.

The file has the shape of MindCluster's faultCode.json (one list per handling level,
component/ascend-device-plugin/build/faultCode.json) with the per-code frequency of its
faultCustomization.json (`FaultFrequency`: EventId, TimeWindow, Times, FaultHandling) folded
into each entry:

    {"format": "ascendctl-faults/1",
     "restart": [{"codes": ["80E01801"], "persistence": {"readings": 1}, "source": "..."}],
     "isolate": [{"codes": ["80E01801"], "persistence": {"readings": 2, "window_s": 86400}, ...}]}

Actions, mildest first: ignore, alert, restart (the serving group), drain (the replica),
isolate (the node). A code may sit under several actions (escalation); at most once under
each. A site file has the same shape and is merged over the defaults: a code or signal the
site file names anywhere loses every default entry for it. Problems are reported as
`file:line: field: message`, all of them at once.

An entry may say `where` it was written (`file:line`): `table_to_json` writes a merged table
as one file that way (the controller renders it into the node's faults.json), so that the
node's actions still name the default's or the site file's line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ascendctl_runtime.faults import locjson
from ascendctl_runtime.faults.signals import SIGNALS

FORMAT = "ascendctl-faults/1"
ACTIONS = ("ignore", "alert", "restart", "drain", "isolate")
DEFAULTS_PATH = Path(__file__).with_name("policy_defaults.json")
_FAULT_CODE = re.compile(r"[0-9A-Fa-f]{8}")      # MindCluster: 8 characters, digits and letters
_CANN_CODE = re.compile(r"E[A-Z][0-9]{4}")
_SETTINGS = ("clear_after_readings", "temp_high_c", "unknown_code")
_ENTRY_KEYS = ("codes", "persistence", "source", "note", "where")
_UNKNOWN_KEYS = ("action", "persistence", "source", "note", "where")
MAX_READINGS = 100000
MAX_SECONDS = 30 * 86400.0
MAX_WHERE_CHARS = 300


class PolicyError(ValueError):
    def __init__(self, problems: List[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Persistence:
    """`readings` consecutive readings; or, with `window_s`, `readings` occurrences within
    the last `window_s` seconds; or the condition held for `for_s` seconds."""
    readings: int = 1
    window_s: Optional[float] = None
    for_s: Optional[float] = None

    def describe(self) -> str:
        if self.for_s is not None:
            return f"held {self.for_s:g} s"
        if self.window_s is not None:
            return f"{self.readings} within {self.window_s:g} s"
        return "first reading" if self.readings == 1 else f"{self.readings} consecutive readings"


@dataclass(frozen=True)
class Rule:
    action: str
    keys: Tuple[str, ...]
    persistence: Persistence
    source: str
    where: str                # file:line of the entry
    note: str = ""


@dataclass(frozen=True)
class PolicyFile:
    name: str
    rules: Tuple[Rule, ...]
    settings: Dict[str, Any]


@dataclass(frozen=True)
class PolicyTable:
    rules: Tuple[Rule, ...]
    unknown_code: Rule             # a fault code named nowhere in the table
    clear_after_readings: int      # an episode ends after this many readings without it
    temp_high_c: int

    def rules_for(self, key: str) -> Tuple[Rule, ...]:
        found = tuple(rule for rule in self.rules if key in rule.keys)
        if found or key in SIGNALS:
            return found
        return (self.unknown_code,)


class _Checker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.problems: List[str] = []

    def problem(self, line: int, field: str, message: str) -> None:
        self.problems.append(f"{self.name}:{line}: {field}: {message}")


def _line_of(container: Any, key: Any, default: int) -> int:
    if isinstance(container, locjson.LocatedObject):
        return container.key_lines.get(key, container.line)
    if isinstance(container, locjson.LocatedArray) and isinstance(key, int) and key < len(container.item_lines):
        return container.item_lines[key]
    return default


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _normal_key(raw: Any) -> Optional[str]:
    if not isinstance(raw, str):
        return None
    if raw in SIGNALS or _CANN_CODE.fullmatch(raw):
        return raw
    if _FAULT_CODE.fullmatch(raw):
        return raw.upper()
    return None


def _persistence(check: _Checker, value: Any, line: int, field: str) -> Persistence:
    if not isinstance(value, locjson.LocatedObject):
        check.problem(line, field, "must be an object such as {\"readings\": 3}")
        return Persistence()
    for key in value:
        if key not in ("readings", "window_s", "for_s"):
            check.problem(value.key_lines[key], f"{field}.{key}", "unknown key (readings, window_s, for_s)")
    readings, window, held = value.get("readings"), value.get("window_s"), value.get("for_s")
    if held is not None:
        if readings is not None or window is not None:
            check.problem(value.line, field, "for_s stands alone (no readings or window_s with it)")
        if not _number(held) or not 0 < held <= MAX_SECONDS:
            check.problem(value.key_lines["for_s"], f"{field}.for_s", f"must be seconds in (0, {MAX_SECONDS:g}]")
            return Persistence()
        return Persistence(for_s=float(held))
    if readings is None:
        check.problem(value.line, field, "needs readings (and window_s) or for_s")
        return Persistence()
    if isinstance(readings, bool) or not isinstance(readings, int) or not 1 <= readings <= MAX_READINGS:
        check.problem(value.key_lines["readings"], f"{field}.readings", f"must be a whole number in [1, {MAX_READINGS}]")
        return Persistence()
    if window is not None and (not _number(window) or not 0 < window <= MAX_SECONDS):
        check.problem(value.key_lines["window_s"], f"{field}.window_s", f"must be seconds in (0, {MAX_SECONDS:g}]")
        return Persistence()
    return Persistence(readings, float(window) if window is not None else None)


def _common(check: _Checker, obj: locjson.LocatedObject, field: str, allowed: Tuple[str, ...],
            site: bool) -> Tuple[Persistence, str, str, str]:
    """The persistence, source, note and where of an entry (or of unknown_code)."""
    for key in obj:
        if key not in allowed:
            check.problem(obj.key_lines[key], f"{field}.{key}", "unknown key (" + ", ".join(allowed) + ")")
    persistence = Persistence()
    if "persistence" in obj:
        persistence = _persistence(check, obj["persistence"], obj.key_lines["persistence"], f"{field}.persistence")
    source = obj.get("source")
    if source is None and site:
        source = f"site file {check.name}"
    if not isinstance(source, str) or not source.strip():
        check.problem(_line_of(obj, "source", obj.line), f"{field}.source", "must say where this default comes from")
        source = ""
    note = obj.get("note", "")
    if not isinstance(note, str):
        check.problem(obj.key_lines["note"], f"{field}.note", "must be text")
        note = ""
    where = obj.get("where", f"{check.name}:{obj.line}")
    if not isinstance(where, str) or not 0 < len(where) <= MAX_WHERE_CHARS:
        check.problem(_line_of(obj, "where", obj.line), f"{field}.where",
                      f"must be file:line, at most {MAX_WHERE_CHARS} characters")
        where = f"{check.name}:{obj.line}"
    return persistence, source, note, where


def _entry(check: _Checker, action: str, index: int, entry: Any, line: int, site: bool) -> Optional[Rule]:
    field = f"{action}[{index}]"
    if not isinstance(entry, locjson.LocatedObject):
        check.problem(line, field, "must be an object with codes, persistence and source")
        return None
    codes = entry.get("codes")
    keys: List[str] = []
    if not isinstance(codes, locjson.LocatedArray) or not codes:
        check.problem(_line_of(entry, "codes", entry.line), f"{field}.codes", "must be a non-empty list")
    else:
        for i, raw in enumerate(codes):
            key = _normal_key(raw)
            if key is None:
                check.problem(codes.item_lines[i], f"{field}.codes[{i}]",
                              f"{raw!r} is neither a fault code (8 hex digits), a CANN error code "
                              "(E + letter + 4 digits) nor a signal (" + ", ".join(SIGNALS) + ")")
            else:
                keys.append(key)
    persistence, source, note, where = _common(check, entry, field, _ENTRY_KEYS, site)
    return Rule(action, tuple(keys), persistence, source, where, note)


def _unknown_code(check: _Checker, value: Any, line: int, site: bool) -> Optional[Rule]:
    field = "unknown_code"
    if not isinstance(value, locjson.LocatedObject):
        check.problem(line, field, "must be an object with action, persistence and source")
        return None
    action = value.get("action")
    if action not in ACTIONS:
        check.problem(_line_of(value, "action", line), f"{field}.action", "must be one of " + ", ".join(ACTIONS))
        return None
    persistence, source, note, where = _common(check, value, field, _UNKNOWN_KEYS, site)
    return Rule(action, (), persistence, source, where, note)


def parse_policy(text: str, name: str, site: bool = True) -> PolicyFile:
    """A policy file's text → its rules and settings, or PolicyError listing every problem.
    `site`: a site file (source optional, settings optional) rather than the defaults."""
    check = _Checker(name)
    try:
        document = locjson.loads(text)
    except locjson.JsonError as err:
        raise PolicyError([f"{name}:{err.line}: json: {err.message}"]) from None
    if not isinstance(document, locjson.LocatedObject):
        raise PolicyError([f"{name}:1: document: must be an object"])
    if document.get("format") != FORMAT:
        check.problem(_line_of(document, "format", 1), "format", f"must be {FORMAT!r}")
    rules: List[Rule] = []
    settings: Dict[str, Any] = {}
    for key, value in document.items():
        line = document.key_lines[key]
        if key == "format":
            continue
        if key in ACTIONS:
            if not isinstance(value, locjson.LocatedArray):
                check.problem(line, key, "must be a list of entries")
                continue
            seen: Dict[str, int] = {}
            for index, entry in enumerate(value):
                rule = _entry(check, key, index, entry, value.item_lines[index], site)
                if rule is None:
                    continue
                entry_line = entry.line
                for code in rule.keys:
                    if code in seen:
                        check.problem(entry_line, f"{key}[{index}].codes",
                                      f"{code} is already under {key} (line {seen[code]})")
                    seen[code] = entry_line
                rules.append(rule)
        elif key == "clear_after_readings":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                check.problem(line, key, "must be a whole number in [1, 1000]")
            settings[key] = value
        elif key == "temp_high_c":
            if isinstance(value, bool) or not isinstance(value, int) or not 40 <= value <= 150:
                check.problem(line, key, "must be whole degrees C in [40, 150]")
            settings[key] = value
        elif key == "unknown_code":
            rule = _unknown_code(check, value, line, site)
            if rule is not None:
                settings[key] = rule
        else:
            check.problem(line, key, "unknown key (format, " + ", ".join(ACTIONS + _SETTINGS) + ")")
    if not site:
        for key in _SETTINGS:
            if key not in settings:
                check.problem(1, key, "the defaults must set it")
    if check.problems:
        raise PolicyError(check.problems)
    return PolicyFile(name, tuple(rules), settings)


def merge(defaults: PolicyFile, site: Optional[PolicyFile] = None) -> PolicyTable:
    rules = list(defaults.rules)
    settings = dict(defaults.settings)
    if site is not None:
        named = {key for rule in site.rules for key in rule.keys}
        rules = [Rule(r.action, tuple(k for k in r.keys if k not in named), r.persistence, r.source, r.where, r.note)
                 for r in rules]
        rules = [r for r in rules if r.keys] + list(site.rules)
        settings.update(site.settings)
    rules.sort(key=lambda r: ACTIONS.index(r.action))      # stable: each action's entries in order
    return PolicyTable(tuple(rules), settings["unknown_code"], settings["clear_after_readings"],
                       settings["temp_high_c"])


def _persistence_json(persistence: Persistence) -> Dict[str, Any]:
    if persistence.for_s is not None:
        return {"for_s": persistence.for_s}
    out: Dict[str, Any] = {"readings": persistence.readings}
    if persistence.window_s is not None:
        out["window_s"] = persistence.window_s
    return out


def _rule_json(rule: Rule, head: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(head, persistence=_persistence_json(rule.persistence), source=rule.source)
    if rule.note:
        out["note"] = rule.note
    out["where"] = rule.where
    return out


def table_to_dict(table: PolicyTable) -> Dict[str, Any]:
    """A merged table as one policy document (format ascendctl-faults/1, the defaults' shape)
    that `table_from_dict` (parse_policy with site=False, then merge) reads back equal."""
    document: Dict[str, Any] = {
        "format": FORMAT, "clear_after_readings": table.clear_after_readings,
        "temp_high_c": table.temp_high_c,
        "unknown_code": _rule_json(table.unknown_code, {"action": table.unknown_code.action})}
    for action in ACTIONS:
        entries = [_rule_json(r, {"codes": list(r.keys)}) for r in table.rules if r.action == action]
        if entries:
            document[action] = entries
    return document


def table_to_json(table: PolicyTable) -> str:
    return json.dumps(table_to_dict(table), indent=2) + "\n"


def table_from_dict(document: Dict[str, Any], name: str) -> PolicyTable:
    """The table a node's config carries (table_to_dict's document), read by the strict
    loader; PolicyError when it is not a complete, valid table."""
    return merge(parse_policy(json.dumps(document, indent=2), name, site=False))


def load_policy(site_path: Optional[str] = None, site_text: Optional[str] = None) -> PolicyTable:
    """The shipped defaults, with the site's file merged over them (controller side; a
    caller that read the file itself passes its SITE_TEXT)."""
    defaults = parse_policy(DEFAULTS_PATH.read_text(encoding="utf-8"), DEFAULTS_PATH.name, site=False)
    site = None
    if site_path is not None:
        text = site_text if site_text is not None else Path(site_path).read_text(encoding="utf-8")
        site = parse_policy(text, str(site_path), site=True)
    return merge(defaults, site)
