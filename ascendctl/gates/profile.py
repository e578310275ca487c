"""The bench profile of the regression gate and the envelope sweep (slo.promotion.profile),
cut to what the deployment serves, and stored with each release's evidence: figures are
only compared between runs of the same profile (its digest)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from ascendctl.inventory import Inventory
from ascendctl.inventory.promotion import PromotionSpec


@dataclass(frozen=True)
class Profile:
    input_len: int          # random prompt tokens
    output_len: int         # tokens out (EOS ignored)
    concurrency: int        # requests in flight
    num_prompts: int        # requests per round
    seed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def at(self, concurrency: int, num_prompts: int) -> "Profile":
        return replace(self, concurrency=concurrency, num_prompts=num_prompts)

    def describe(self) -> str:
        return (f"{self.num_prompts} requests of {self.input_len} tokens in / "
                f"{self.output_len} out at concurrency {self.concurrency}")

    @classmethod
    def from_dict(cls, data: Any) -> "Profile":
        return cls(**{k: int(data[k]) for k in
                      ("input_len", "output_len", "concurrency", "num_prompts", "seed")})


def resolve_profile(inv: Inventory, spec: PromotionSpec) -> Profile:
    """The inventory's profile, its lengths cut so that a request fits max_model_len (the
    output keeps at most half of it)."""
    p = spec.profile
    limit = inv.serving.max_model_len
    output = max(1, min(p.output_len, limit // 2))
    prompt = max(1, min(p.input_len, limit - output - 1))
    return Profile(input_len=prompt, output_len=output, concurrency=p.concurrency,
                   num_prompts=max(p.prompts_per_round, p.concurrency), seed=p.seed)
