"""Run the quality gate against a serving group's head, judge it, store it there.

The prompts are sent ON the head (runtime quality_node.py), to its own API on 127.0.0.1,
with the API key read there from the release's 0600 secrets.env: the jump host never
holds the key, and nothing about it travels over the connection. Three calls over one
connection: locate (the release, the one it replaced, that one's recorded answers),
generate, store.
"""

from __future__ import annotations

import getpass
import math
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from ascendctl.benchmark.run import make_stamp
from ascendctl.benchmark.settings import served_model
from ascendctl.errors import AscendctlError, InputError
from ascendctl.inventory.quality import DEFAULT_GATE
from ascendctl.quality.agreement import mean_agreement, token_agreement
from ascendctl.inventory.prompt_regex import MatchUndecided, RegexSearcher
from ascendctl.inventory.prompts import PromptSet, QualityPrompt, check_token_limits
from ascendctl.quality.result import (
    AgreementFigures, PromptOutcome, PromptSetInfo, QualityReport, Reference,
)
from ascendctl.render.files import release_dir
from ascendctl.transport.nodecall import NodeCallError, call_node
from ascendctl.inventory.pd import entry_port

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.inventory.quality import QualitySpec
    from ascendctl.transport.remote import Remote

QUICK_TIMEOUT_S = 60.0
ENTRY = "quality_node"


class QualityGateError(AscendctlError):
    """The gate could not run at all (nothing deployed, the node serves another release)."""


@dataclass(frozen=True)
class LiveReference:
    """A node still serving the previous release (another group's head during a rolling
    deploy): asked the same prompts when that release left no gate record."""

    node: "Host"
    conn: "Remote"
    release: str


@dataclass(frozen=True)
class NodeAnswer:
    id: str
    text: Optional[str]
    token_ids: Optional[list[int]]
    finish_reason: Optional[str]
    error: Optional[str]
    seconds: Optional[float]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "NodeAnswer":
        return cls(id=str(data.get("id")), text=data.get("text"),
                   token_ids=data.get("token_ids"), finish_reason=data.get("finish_reason"),
                   error=data.get("error"), seconds=data.get("seconds"))


@dataclass(frozen=True)
class ReferenceAnswers:
    reference: Reference
    answers: dict[str, NodeAnswer]


class QualityNode:
    """runtime quality_node.py operations on one node, over its connection."""

    def __init__(self, inv: "Inventory", node: "Host", conn: "Remote"):
        self.inv, self.node, self.conn = inv, node, conn

    def call(self, op: str, timeout: float = QUICK_TIMEOUT_S, **kwargs: Any) -> dict[str, Any]:
        try:
            return call_node(self.conn, node=self.node.name, python=self.inv.deploy.python,
                             entry=ENTRY, timeout=timeout,
                             request={"op": op,
                                      "kwargs": {"root": self.inv.deploy.root, **kwargs}})
        except NodeCallError as err:
            raise QualityGateError(str(err)) from None

    def generate(self, release: str, requests: list[dict[str, Any]],
                 spec: "QualitySpec") -> list[NodeAnswer]:
        rounds = math.ceil(len(requests) / spec.concurrency)
        answer = self.call("generate", timeout=rounds * spec.request_timeout + QUICK_TIMEOUT_S,
                           release=release, port=entry_port(self.inv),
                           model=served_model(self.inv, release_dir(self.inv.deploy.root,
                                                                    release)),
                           prompts=requests, concurrency=spec.concurrency,
                           timeout_s=spec.request_timeout)
        return [NodeAnswer.from_json(item) for item in answer["outputs"]]


def gate_spec(inv: "Inventory") -> "QualitySpec":
    """slo.quality, or the default gate (agreement with the previous release over the
    built-in prompt set) when the inventory sets none."""
    return inv.slo.quality or DEFAULT_GATE


def check_fits(inv: "Inventory", prompt_set: PromptSet, max_tokens: int) -> None:
    """Refuse token limits the engine would reject (max_tokens >= max_model_len). The
    inventory's own gate was checked when it was loaded; this one may be the default."""
    where = ("all", "vars", "slo", "quality", "max_tokens")

    def set_limit_error(message: str) -> InputError:
        return InputError(message, file=str(inv.path), line=inv.source.line_of(where),
                          field=".".join(where))

    check_token_limits(prompt_set, max_tokens, inv.serving.max_model_len, set_limit_error)


def run_quality_gate(inv: "Inventory", release_id: Optional[str], conn: "Remote", *,
                     node: Optional["Host"] = None,
                     previous_release: Optional[str] = None,
                     live_reference: Optional[LiveReference] = None,
                     baseline: bool = False,
                     say: Callable[[str], None] = lambda _msg: None) -> QualityReport:
    """Gate RELEASE_ID (None: whatever `current` is) as served by NODE (default: the head),
    over CONN, its connection. The report is stored on that node and returned; it fails
    (report.passed False, report.summary() naming the gate) when a request fails, an
    expected answer does not match, or the agreement with the previous release is below
    slo.quality.min_agreement. Raises QualityGateError when the gate cannot run at all.

    previous_release: the release to agree with (default: the one `current` pointed at
    before RELEASE_ID was switched in, from history.jsonl). live_reference: a node still
    serving it, asked when it left no record. baseline: record these answers as the
    reference without comparing (the previous release left none)."""
    spec = gate_spec(inv)
    node = node or inv.head
    prompt_set = spec.prompt_set()
    check_fits(inv, prompt_set, spec.max_tokens)
    requests = prompt_set.requests(spec.max_tokens)
    digest = prompt_set.digest(spec.max_tokens)
    here = QualityNode(inv, node, conn)
    started = time.monotonic()
    where = here.call("locate", digest=digest, release=release_id, previous=previous_release)
    if where.get("release") is None:
        raise QualityGateError(f"{node.name}: nothing is deployed ({inv.deploy.root}/current "
                               "does not exist); run `ascendctl deploy` first")
    release = where["release"]
    if where["current"] != release:
        raise QualityGateError(f"{node.name}: serves {where['current'] or 'nothing'}, not "
                               f"release {release}; the gate asks the engine that serves")
    reference: Optional[ReferenceAnswers] = None
    ref_info: Optional[Reference] = None
    if spec.agree_with_previous:
        reference, ref_info = _reference(inv, where, spec, requests, baseline,
                                         live_reference, say)
    say(f"{node.name}: {len(requests)} prompts to release {release} at temperature 0 "
        f"({spec.concurrency} at once, up to {spec.max_tokens} tokens each)")
    answers = here.generate(release, requests, spec)
    outcomes = evaluate(prompt_set, answers, reference)
    agreement = None
    problems = problems_of(outcomes)
    if reference is not None:
        agreement = agreement_figures(outcomes, spec.min_agreement)
        if not agreement.passed:
            problems.append(f"agreement {agreement.mean:.3f} < min_agreement "
                            f"{spec.min_agreement:g} with {reference.reference.describe()} "
                            f"({sum(1 for o in outcomes if o.diverged)} of "
                            f"{len(outcomes)} answers differ)")
    if ref_info is not None and ref_info.kind == "missing":
        problems.append(f"nothing to agree with: {ref_info.describe()} and no node serves it; "
                        "record one with `ascendctl bench --quality --baseline` while it "
                        "serves, or accept this release's answers with --baseline")
    report = QualityReport(
        cluster=inv.cluster.name, node=node.name, release=release, stamp=_stamp(),
        mode=spec.mode, prompt_set=PromptSetInfo(prompt_set.source, digest,
                                                 len(prompt_set.prompts)),
        max_tokens=spec.max_tokens, outcomes=outcomes, reference=ref_info,
        agreement=agreement, problems=problems,
        seconds=round(time.monotonic() - started, 3))
    report.stored = _store(here, report)
    return report


def _reference(inv: "Inventory", where: dict[str, Any], spec: "QualitySpec",
               requests: list[dict[str, Any]], baseline: bool,
               live: Optional[LiveReference], say: Callable[[str], None]
               ) -> tuple[Optional[ReferenceAnswers], Reference]:
    previous = where.get("previous")
    if baseline:
        return None, Reference("baseline", release=previous)
    if previous is None:
        return None, Reference("none")
    record = where.get("reference")
    if record:
        say(f"reference: the answers recorded at release {previous}'s gate ({record['stamp']})")
        answers = {key: NodeAnswer(id=key, text=value.get("text"),
                                   token_ids=value.get("token_ids"), finish_reason=None,
                                   error=None, seconds=None)
                   for key, value in record["outputs"].items()}
        info = Reference("record", release=previous, stamp=record["stamp"])
        return ReferenceAnswers(info, answers), info
    if live is not None and live.release == previous:
        say(f"reference: release {previous} has no gate record; asking {live.node.name}, "
            "which still serves it")
        live_answers = QualityNode(inv, live.node, live.conn).generate(previous, requests, spec)
        failed = [a for a in live_answers if a.error]
        if failed:
            raise QualityGateError(f"{live.node.name}: the reference release {previous} did "
                                   f"not answer prompt {failed[0].id}: {failed[0].error}")
        info = Reference("live", release=previous, node=live.node.name)
        return ReferenceAnswers(info, {a.id: a for a in live_answers}), info
    return None, Reference("missing", release=previous)


def evaluate(prompt_set: PromptSet, answers: list[NodeAnswer],
             reference: Optional[ReferenceAnswers]) -> list[PromptOutcome]:
    """Each prompt's answer against its expected answer and the reference's answer. A
    regex that gives no verdict within its deadline fails its prompt, saying why."""
    by_id = {a.id: a for a in answers}
    with RegexSearcher() as searcher:
        return [_outcome(prompt, by_id.get(prompt.id), reference, searcher)
                for prompt in prompt_set.prompts]


def _outcome(prompt: QualityPrompt, answer: Optional[NodeAnswer],
             reference: Optional[ReferenceAnswers], searcher: RegexSearcher) -> PromptOutcome:
    text = answer.text if answer else None
    tokens = answer.token_ids if answer else None
    outcome = PromptOutcome(id=prompt.id, prompt=prompt.shown(), status="pass",
                            text=text, token_ids=tokens,
                            finish_reason=answer.finish_reason if answer else None,
                            error=answer.error if answer else "no answer",
                            expect=prompt.expect, seconds=answer.seconds if answer else None)
    if text is not None and prompt.expect is not None:
        try:
            outcome.expect_ok = prompt.expect.matches(text, searcher)
        except MatchUndecided as undecided:
            outcome.expect_ok = False
            outcome.error = outcome.error or str(undecided)
    if reference is not None:
        ref = reference.answers.get(prompt.id)
        outcome.reference_text = ref.text if ref else None
        if ref is None or ref.token_ids is None:
            outcome.error = outcome.error or "the reference has no answer to this prompt"
        elif tokens is None:
            outcome.error = outcome.error or ("the engine returned no token ids (it does "
                                              "not support `return_token_ids`)")
        else:
            measured = token_agreement(ref.token_ids, tokens)
            outcome.agreement, outcome.diverges_at = measured.agreement, measured.diverges_at
    if outcome.problem:
        outcome.status = "fail"
    return outcome


def problems_of(outcomes: list[PromptOutcome]) -> list[str]:
    failed = [o for o in outcomes if o.status == "fail"]
    if not failed:
        return []
    shown = "; ".join(f"{o.id}: {o.problem}" for o in failed[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    return [f"{len(failed)} of {len(outcomes)} prompts failed ({shown}{more})"]


def agreement_figures(outcomes: list[PromptOutcome], min_agreement: float) -> AgreementFigures:
    """Over every prompt: one without a comparable answer (an error) counts as 0."""
    values = [o.agreement if o.agreement is not None else 0.0 for o in outcomes]
    identical = sum(1 for o in outcomes if o.agreement == 1.0)
    return AgreementFigures(mean=mean_agreement(values),
                            exact_rate=identical / len(outcomes) if outcomes else 0.0,
                            min_agreement=min_agreement, compared=len(outcomes))


def _stamp() -> str:
    return make_stamp()


def _store(here: QualityNode, report: QualityReport) -> str:
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {**report.as_dict(), "time": when, "by": by}
    record.pop("stored", None)
    event = {"event": "quality", "release": report.release, "time": when, "by": by,
             "stamp": report.stamp, "status": report.status, "mode": report.mode,
             "node": report.node, "summary": report.summary()[:300],
             "agreement": report.agreement.mean if report.agreement else None}
    stored = here.call("store", release=report.release, stamp=report.stamp, record=record,
                       event=event)
    return stored["path"]


def has_recorded_answers(inv: "Inventory", release: str, conn: "Remote",
                         node: Optional["Host"] = None) -> bool:
    """Whether RELEASE has a passing gate record of the inventory's prompt set on NODE: a
    rolling deploy that finds none records one (run_quality_gate(..., baseline=True))
    while RELEASE still serves, so the first switched group has something to agree with."""
    spec = gate_spec(inv)
    digest = spec.prompt_set().digest(spec.max_tokens)
    where = QualityNode(inv, node or inv.head, conn).call("locate", digest=digest,
                                                           previous=release)
    return bool(where.get("reference"))


def latest_gate_results(inv: "Inventory", conn: "Remote",
                        node: Optional["Host"] = None) -> dict[str, dict[str, Any]]:
    """Each release's newest gate record on the head (summaries), for `history`."""
    return QualityNode(inv, node or inv.head, conn).call("list")["latest"]

