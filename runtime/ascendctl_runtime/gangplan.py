"""The supervisor's plan for the serving group, and its signature.

The supervisor (on the head) publishes one plan; every node's agent fetches it over HTTP
and does its own part. Nothing is pushed to a node: an agent only ever acts on a plan
that (1) carries a valid HMAC-SHA256 under the cluster's token (kept in the release's
0600 secrets.env), (2) names its cluster and release, and (3) is newer than or equal to the
last generation it saw; each action is done at most once per generation, so a replayed
plan does nothing.

    action "stop"   every rank stops its engine units (followers and head alike)
    action "start"  ranks start their units in the order of `steps`, up to `start_upto`
    action "run"    hands off: every rank keeps what runs
    action "hold"   hands off (a deploy or an operator holds recovery)
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ascendctl_runtime.layout import HEALTH_TOKEN_VAR
from ascendctl_runtime.nodeutil import parse_env_file

TOKEN_KEY = HEALTH_TOKEN_VAR
ACTIONS = ("stop", "start", "run", "hold")


class PlanError(ValueError):
    """A plan that must not be acted on (bad signature, malformed, not ours)."""


@dataclass(frozen=True)
class Plan:
    cluster: str
    release: str
    generation: int
    action: str
    steps: tuple[tuple[str, str], ...] = ()      # (node, unit) in start order
    start_upto: int = -1                         # steps[0..start_upto] may run
    handled_requests: tuple[str, ...] = ()       # watchdog requests this generation answers
    issued: float = 0.0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["steps"] = [list(step) for step in self.steps]
        data["handled_requests"] = list(self.handled_requests)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "Plan":
        if not isinstance(data, dict):
            raise PlanError("plan is not an object")
        try:
            plan = cls(cluster=str(data["cluster"]), release=str(data["release"]),
                       generation=int(data["generation"]), action=str(data["action"]),
                       steps=tuple((str(n), str(u)) for n, u in data.get("steps", [])),
                       start_upto=int(data.get("start_upto", -1)),
                       handled_requests=tuple(str(r) for r in data.get("handled_requests", [])),
                       issued=float(data.get("issued", 0.0)), note=str(data.get("note", "")))
        except (KeyError, TypeError, ValueError) as err:
            raise PlanError(f"malformed plan: {err}") from None
        if plan.action not in ACTIONS:
            raise PlanError(f"unknown action {plan.action!r}")
        return plan

    def steps_for(self, node: str) -> list[tuple[int, str]]:
        """(index, unit) of this node's start steps that the plan lets run now."""
        if self.action != "start":
            return []
        return [(i, unit) for i, (name, unit) in enumerate(self.steps)
                if name == node and i <= self.start_upto]


def canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sign(plan: Plan, token: bytes) -> dict[str, Any]:
    body = plan.to_dict()
    return {"plan": body, "mac": hmac.new(token, canonical(body), hashlib.sha256).hexdigest()}


def verify(document: Any, token: bytes) -> Plan:
    """The plan inside a signed document, or PlanError."""
    if not isinstance(document, dict) or not isinstance(document.get("plan"), dict):
        raise PlanError("not a signed plan")
    expected = hmac.new(token, canonical(document["plan"]), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, str(document.get("mac", ""))):
        raise PlanError("bad signature")
    return Plan.from_dict(document["plan"])


def read_token(secrets_file: Optional[str]) -> Optional[bytes]:
    """The cluster token from the release's secrets.env (None if absent)."""
    if not secrets_file:
        return None
    try:
        with open(secrets_file, encoding="utf-8") as handle:
            value = parse_env_file(handle.read()).get(TOKEN_KEY)
    except OSError:
        return None
    return value.encode() if value else None


@dataclass
class PlanView:
    """What an agent knows about the plan it last fetched (for its published state)."""

    generation: Optional[int] = None
    action: Optional[str] = None
    error: Optional[str] = None
    fetched_at: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)
