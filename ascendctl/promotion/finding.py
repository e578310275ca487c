"""What a judgment of this package found wrong: one for each of its verdicts' findings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    kind: str           # one of the judging module's constants (garbage.LOOP, soak.STALL, ...)
    detail: str         # a sentence for the operator, with the figures that decided it
