"""How far two greedy answers agree, token by token.

Per prompt: the length of the common prefix of the two token sequences divided by the
longer one's length (1.0 when both are empty). Greedy decoding conditions every token on
the ones before it, so after the first differing token the rest is a different
continuation: positions after it say nothing, and only the prefix counts.

Over a prompt set: the mean of the per-prompt agreements. A benign numerical difference
(another kernel, batch shape or engine build rounding a near tie the other way) flips a
token late in a few answers and costs each of them only the tail after it; a change in
what the model computes (a scaled tensor, a wrong quantisation scale, a broken shard)
moves the argmax within the first tokens of most answers and drives the mean towards 0.
The exact-match rate (answers identical to the last token) is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class TokenAgreement:
    agreement: float          # common prefix / longer length, 0..1
    diverges_at: int | None   # index of the first differing token; None if identical
    compared_tokens: int      # the longer length


def common_prefix(left: Sequence[int], right: Sequence[int]) -> int:
    count = 0
    for a, b in zip(left, right):
        if a != b:
            break
        count += 1
    return count


def token_agreement(reference: Sequence[int], candidate: Sequence[int]) -> TokenAgreement:
    longest = max(len(reference), len(candidate))
    if longest == 0:
        return TokenAgreement(1.0, None, 0)
    prefix = common_prefix(reference, candidate)
    identical = prefix == len(reference) == len(candidate)
    return TokenAgreement(prefix / longest, None if identical else prefix, longest)


def mean_agreement(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0

