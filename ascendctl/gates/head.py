"""One serving group's head as the gates use it: runtime promotion_node.py operations over
the head's persistent connection (the load runs on the head, against 127.0.0.1)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ascendctl_runtime import layout

from ascendctl.benchmark.figures import BenchFigures, parse_result
from ascendctl.benchmark.settings import served_model
from ascendctl.errors import AscendctlError
from ascendctl.gates.profile import Profile
from ascendctl.inventory.pd import entry_port
from ascendctl.transport.nodecall import NodeCallError, call_node

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.transport.remote import Remote

ENTRY = "promotion_node"
QUICK_TIMEOUT_S = 60.0
# what a call may take beyond the time the load itself is allowed
CALL_MARGIN_S = 120.0


class GateError(AscendctlError):
    """A gate could not measure (the head does not serve the release, a call failed)."""


@dataclass
class LoadRun:
    """One run of requests on one head: vLLM-bench-format figures (None when no request
    finished), each request's record, and whether the run hung (its limit reached with
    requests outstanding)."""

    release: str
    node: str
    figures: Optional[BenchFigures]
    requests: list[dict[str, Any]]
    hung: bool
    wall_s: float
    started: float              # the controller's clock when the run was asked for

    @property
    def errors(self) -> int:
        return sum(1 for r in self.requests if r.get("error"))


class GateHead:
    def __init__(self, inv: "Inventory", host: "Host", conn: "Remote", release: str):
        self.inv, self.host, self.conn, self.release = inv, host, conn, release
        self._where: Optional[dict[str, Any]] = None

    @property
    def name(self) -> str:
        return self.host.name

    def call(self, op: str, timeout: float = QUICK_TIMEOUT_S, **kwargs: Any) -> dict[str, Any]:
        try:
            return call_node(self.conn, node=self.host.name, python=self.inv.deploy.python,
                             entry=ENTRY, timeout=timeout,
                             request={"op": op, "kwargs": {"root": self.inv.deploy.root,
                                                           **kwargs}})
        except NodeCallError as err:
            raise GateError(str(err)) from None

    def where(self) -> dict[str, Any]:
        """The release this head serves, checked to be RELEASE, with its vocabulary."""
        if self._where is None:
            where = self.call("locate", release=self.release)
            if where.get("current") != self.release:
                raise GateError(f"{self.name} serves {where.get('current') or 'nothing'}, "
                                f"not {self.release}")
            if not where.get("vocab_size"):
                raise GateError(f"{self.name}: {where.get('model_dir')}/config.json gives no "
                                "vocab_size (the random prompts are token ids)")
            self._where = where
        return self._where

    @property
    def model(self) -> str:
        return served_model(self.inv, self.where()["release_dir"])

    @property
    def port(self) -> int:
        return entry_port(self.inv)

    def load(self, profile: Profile, limit_s: float) -> LoadRun:
        started = time.time()
        answer = self.call("load", timeout=limit_s + CALL_MARGIN_S, release=self.release,
                           port=self.port, model=self.model, profile=profile.as_dict(),
                           vocab=int(self.where()["vocab_size"]), limit_s=limit_s,
                           request_timeout_s=limit_s)
        return self._run(answer, started)

    def tail(self, prompts: list[dict[str, Any]], requests: int, concurrency: int,
             limit_s: float, request_timeout_s: float,
             sampling: dict[str, Any]) -> LoadRun:
        started = time.time()
        answer = self.call("tail", timeout=limit_s + CALL_MARGIN_S, release=self.release,
                           port=self.port, model=self.model, prompts=prompts,
                           requests=requests, concurrency=concurrency, limit_s=limit_s,
                           request_timeout_s=request_timeout_s, sampling=sampling)
        return self._run(answer, started)

    def soak(self, profile: Profile, duration_s: float, sample_s: float,
             request_timeout_s: float) -> tuple[LoadRun, list[dict[str, Any]]]:
        started = time.time()
        answer = self.call("soak", timeout=duration_s + request_timeout_s + CALL_MARGIN_S,
                           release=self.release, port=self.port, model=self.model,
                           profile=profile.as_dict(), vocab=int(self.where()["vocab_size"]),
                           duration_s=duration_s, sample_s=sample_s,
                           engine_units=list(layout.ENGINE_UNITS),
                           metrics_port=self.inv.serving.port,
                           request_timeout_s=request_timeout_s)
        return self._run(answer, started), list(answer.get("samples") or [])

    def _run(self, answer: dict[str, Any], started: float) -> LoadRun:
        result = answer.get("result") or {}
        figures = parse_result(result) if result.get("completed") else None
        return LoadRun(release=self.release, node=self.name, figures=figures,
                       requests=list(answer.get("requests") or []),
                       hung=bool(answer.get("hung")),
                       wall_s=float(result.get("duration") or 0.0),
                       started=started)

    def stored_record(self, release: str, gate: str) -> Optional[dict[str, Any]]:
        """RELEASE's newest passing GATE record kept on this head."""
        return self.call("record", release=release, gate=gate).get("record")

    def store(self, stamp: str, record: dict[str, Any], html: Optional[str],
              event: dict[str, Any]) -> dict[str, Any]:
        return self.call("store", release=self.release, stamp=stamp, record=record,
                         html=html, event=event)
