"""What a node answers to release operations (runtime/ascendctl_runtime/release_ops.py),
as typed values. The node prints JSON; `from_json` is the only place that reads its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional


def _text(data: Mapping[str, Any], key: str, default: str = "") -> str:
    value = data.get(key)
    return default if value is None else str(value)


def _optional_text(data: Mapping[str, Any], key: str) -> Optional[str]:
    value = data.get(key)
    return None if value is None else str(value)


def _int(data: Mapping[str, Any], key: str) -> int:
    try:
        return int(data.get(key) or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class UnitState:
    """One systemd unit on a node (`systemctl show`), and the sha256 of its installed file."""

    load: str = "unknown"              # loaded | not-found | ...
    active: str = "unknown"            # active | activating | failed | inactive | ...
    sub: str = ""
    result: str = ""
    main_pid: int = 0
    restarts: int = 0
    since_us: int = 0
    file_state: str = ""               # enabled | disabled | ... (UnitFileState)
    installed_sha: Optional[str] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "UnitState":
        return cls(load=_text(data, "load", "unknown"), active=_text(data, "active", "unknown"),
                   sub=_text(data, "sub"), result=_text(data, "result"),
                   main_pid=_int(data, "main_pid"), restarts=_int(data, "restarts"),
                   since_us=_int(data, "since_us"), file_state=_text(data, "file_state"),
                   installed_sha=_optional_text(data, "installed_sha"))

    @property
    def loaded(self) -> bool:
        return self.load == "loaded"

    @property
    def running(self) -> bool:
        return self.active == "active"

    @property
    def enabled(self) -> bool:
        return self.file_state == "enabled"


@dataclass(frozen=True)
class ReleaseInfo:
    id: str
    status: str                        # staged | active | failed | superseded | unknown
    created: Optional[str] = None
    by: Optional[str] = None
    summary: dict[str, Any] = field(default_factory=dict)
    units: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ReleaseInfo":
        summary = data.get("summary")
        return cls(id=_text(data, "id"), status=_text(data, "status", "unknown"),
                   created=_optional_text(data, "created"), by=_optional_text(data, "by"),
                   summary=dict(summary) if isinstance(summary, Mapping) else {},
                   units=tuple(str(u) for u in data.get("units") or ()))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["units"] = list(self.units)
        return data


@dataclass(frozen=True)
class LockHolder:
    """Who holds the deploy lock (never its token), and how old its last heartbeat is."""

    holder: str = "?"
    since: Optional[str] = None
    inventory: Optional[str] = None
    heartbeat_age_s: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> Optional["LockHolder"]:
        if not isinstance(data, Mapping):
            return None
        try:
            age = float(data.get("heartbeat_age_s") or 0.0)
        except (TypeError, ValueError):
            age = 0.0
        return cls(holder=_text(data, "holder", "?"), since=_optional_text(data, "since"),
                   inventory=_optional_text(data, "inventory"), heartbeat_age_s=age)

    def describe(self) -> str:
        return f"{self.holder} since {self.since or '?'}"


@dataclass(frozen=True)
class NodeState:
    """A node's releases, `current`, units, history tail and lock (one `state` call)."""

    hostname: str
    current: Optional[str]
    releases: tuple[ReleaseInfo, ...]
    history: tuple[dict[str, Any], ...]     # history.jsonl events, as written
    lock: Optional[LockHolder]
    units: dict[str, UnitState]
    nic: Optional[str] = None
    device_ips: tuple[str, ...] = ()
    leftovers: tuple[str, ...] = ()         # staging directories a dead deploy left
    maintenance: Optional[dict[str, Any]] = None   # drained / isolated (ascendctl node)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NodeState":
        units = data.get("units") or {}
        return cls(
            hostname=_text(data, "hostname"), current=_optional_text(data, "current"),
            releases=tuple(ReleaseInfo.from_json(r) for r in data.get("releases") or ()),
            history=tuple(dict(e) for e in data.get("history") or () if isinstance(e, Mapping)),
            lock=LockHolder.from_json(data.get("lock")),
            units={str(name): UnitState.from_json(state) for name, state in units.items()},
            nic=_optional_text(data, "nic"),
            device_ips=tuple(str(ip) for ip in data.get("device_ips") or ()),
            leftovers=tuple(str(n) for n in data.get("leftovers") or ()),
            maintenance=dict(data["maintenance"]) if isinstance(data.get("maintenance"), Mapping)
            else None)

    def release(self, release_id: str) -> Optional[ReleaseInfo]:
        return next((r for r in self.releases if r.id == release_id), None)

    def unit(self, name: str) -> UnitState:
        return self.units.get(name) or UnitState()

    @property
    def release_ids(self) -> set[str]:
        return {r.id for r in self.releases}


@dataclass(frozen=True)
class StagedFile:
    path: str
    state: str                 # new | changed
    diff: Optional[str] = None


@dataclass(frozen=True)
class StageAnswer:
    release: str
    exists: bool
    identical: bool
    current: Optional[str]
    files: tuple[StagedFile, ...]
    changed: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StageAnswer":
        return cls(release=_text(data, "release"), exists=bool(data.get("exists")),
                   identical=bool(data.get("identical")),
                   current=_optional_text(data, "current"),
                   files=tuple(StagedFile(path=_text(f, "path"), state=_text(f, "state"),
                                          diff=_optional_text(f, "diff"))
                               for f in data.get("files") or ()),
                   changed=bool(data.get("changed")))


@dataclass(frozen=True)
class SwitchAnswer:
    changed: bool
    previous: Optional[str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SwitchAnswer":
        return cls(changed=bool(data.get("changed")), previous=_optional_text(data, "previous"))


@dataclass(frozen=True)
class PruneAnswer:
    changed: bool
    removed: tuple[str, ...]
    kept: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PruneAnswer":
        return cls(changed=bool(data.get("changed")),
                   removed=tuple(str(r) for r in data.get("removed") or ()),
                   kept=tuple(str(r) for r in data.get("kept") or ()))


@dataclass(frozen=True)
class LockAnswer:
    """acquire: acquired (and `broke`, the holder a forced acquire removed) or refused
    (`holder`, `stale`, `refused_force`); heartbeat: `held`; release: `released`.
    `holder` names whoever holds the lock when this caller does not."""

    acquired: bool = False
    held: bool = False
    released: bool = False
    stale: bool = False
    refused_force: bool = False
    holder: Optional[LockHolder] = None
    broke: Optional[LockHolder] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LockAnswer":
        return cls(acquired=bool(data.get("acquired")), held=bool(data.get("held")),
                   released=bool(data.get("released")), stale=bool(data.get("stale")),
                   refused_force=bool(data.get("refused_force")),
                   holder=LockHolder.from_json(data.get("holder")),
                   broke=LockHolder.from_json(data.get("broke")))
