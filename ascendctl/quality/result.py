"""What one run of the quality gate found: per prompt, the answer and what it was held
against; over the set, the agreement with the reference and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from ascendctl.exitcodes import Exit
from ascendctl.inventory.prompts import Expectation, truncate

Status = Literal["pass", "fail"]
# record: the previous release's stored gate outputs; live: asked of a node still serving
# it; none: there is no previous release (this run is the first reference); baseline:
# recorded as the reference on request, without comparing; missing: a previous release
# exists but left nothing to compare with (the gate fails).
ReferenceKind = Literal["record", "live", "none", "baseline", "missing"]
SHOWN_CHARS = 120
ERROR_CHARS = 400      # an engine's error body is in it: shown escaped and bounded


@dataclass(frozen=True)
class Reference:
    kind: ReferenceKind
    release: Optional[str] = None
    stamp: Optional[str] = None      # the record's stamp (kind "record")
    node: Optional[str] = None       # the node asked (kind "live")

    def describe(self) -> str:
        if self.kind == "record":
            return f"release {self.release} (gate record {self.stamp})"
        if self.kind == "live":
            return f"release {self.release} (live on {self.node})"
        if self.kind == "none":
            return "none: no previous release; these answers become the reference"
        if self.kind == "baseline":
            return "none: recorded as the reference on request (--baseline)"
        return f"missing: release {self.release} has no passing gate record of this prompt set"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "release": self.release, "stamp": self.stamp,
                "node": self.node}


@dataclass(frozen=True)
class PromptSetInfo:
    source: str           # the prompt file, or "builtin"
    digest: str           # sha256 of what the model is asked (ids, prompts, token limits)
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "digest": self.digest, "count": self.count}


@dataclass
class PromptOutcome:
    id: str
    prompt: str                          # shown (truncated)
    status: Status
    text: Optional[str]
    token_ids: Optional[list[int]]
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    expect: Optional[Expectation] = None
    expect_ok: Optional[bool] = None
    agreement: Optional[float] = None     # with the reference's answer (agreement mode)
    diverges_at: Optional[int] = None     # first differing token; None when identical
    reference_text: Optional[str] = None
    seconds: Optional[float] = None

    @property
    def problem(self) -> Optional[str]:
        if self.error:
            return truncate(self.error, ERROR_CHARS)
        if self.expect is not None and self.expect_ok is False:
            return (f"expected {self.expect.describe()}, got "
                    f"{truncate(self.text or '', SHOWN_CHARS)!r}")
        return None

    @property
    def diverged(self) -> bool:
        return self.agreement is not None and self.agreement < 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "prompt": self.prompt, "status": self.status, "text": self.text,
            "token_ids": self.token_ids, "finish_reason": self.finish_reason,
            "error": self.error, "expect": self.expect.as_dict() if self.expect else None,
            "expect_ok": self.expect_ok, "agreement": self.agreement,
            "diverges_at": self.diverges_at, "reference_text": self.reference_text,
            "seconds": self.seconds, "problem": self.problem,
        }


@dataclass(frozen=True)
class AgreementFigures:
    mean: float                 # mean per-prompt agreement (common prefix / longer length)
    exact_rate: float           # answers identical to the reference's, to the last token
    min_agreement: float        # slo.quality.min_agreement
    compared: int               # prompts compared

    @property
    def passed(self) -> bool:
        return self.mean >= self.min_agreement

    def as_dict(self) -> dict[str, Any]:
        return {"mean": round(self.mean, 4), "exact_rate": round(self.exact_rate, 4),
                "min_agreement": self.min_agreement, "compared": self.compared}


@dataclass
class QualityReport:
    cluster: str
    node: str
    release: str
    stamp: str
    mode: str                             # "prompts" | "agree_with_previous"
    prompt_set: PromptSetInfo
    max_tokens: int
    outcomes: list[PromptOutcome]
    reference: Optional[Reference]        # agreement mode only
    agreement: Optional[AgreementFigures]
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stored: Optional[str] = None

    @property
    def status(self) -> Status:
        return "fail" if self.problems else "pass"

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> Exit:
        return Exit.OK if self.passed else Exit.FAILED

    @property
    def gate(self) -> str:
        return f"quality gate ({self.mode})"

    def counts(self) -> dict[str, int]:
        return {"prompts": len(self.outcomes),
                "failed": sum(1 for o in self.outcomes if o.status == "fail"),
                "diverged": sum(1 for o in self.outcomes if o.diverged)}

    def summary(self) -> str:
        """One line; on failure it names the gate, the node and the release (what a
        rolling deploy reports as the reason)."""
        if not self.passed:
            return (f"{self.gate} failed on {self.node} for release {self.release}: "
                    + "; ".join(self.problems))
        parts = [f"{len(self.outcomes)} prompts answered"]
        if self.mode == "prompts" or any(o.expect for o in self.outcomes):
            parts.append(f"{sum(1 for o in self.outcomes if o.expect_ok)} expected answers "
                         "matched")
        if self.agreement is not None:
            parts.append(f"agreement {self.agreement.mean:.3f} >= "
                         f"{self.agreement.min_agreement:g} with {self.reference.describe()}"
                         if self.reference else f"agreement {self.agreement.mean:.3f}")
        elif self.reference is not None:
            parts.append(f"reference {self.reference.describe()}")
        return f"{self.gate} passed on {self.node} for release {self.release}: " \
               + ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "node": self.node, "release": self.release,
            "stamp": self.stamp, "mode": self.mode, "status": self.status,
            "summary": self.summary(), "prompt_set": self.prompt_set.as_dict(),
            "max_tokens": self.max_tokens,
            "reference": self.reference.as_dict() if self.reference else None,
            "agreement": self.agreement.as_dict() if self.agreement else None,
            "counts": self.counts(), "problems": list(self.problems),
            "prompts": [o.as_dict() for o in self.outcomes],
            "seconds": self.seconds, "stored": self.stored,
        }
