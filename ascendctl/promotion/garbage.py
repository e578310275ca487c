"""Is an answer degenerate? Empty, unprintable characters, one character or token
repeated, or a loop of n-grams. Pure, bounded input, time linear in it.

These are the ways a broken decode shows in the text a sampled (temperature > 0) answer
brings back, where no expected answer exists: a numerics or kernel bug that drives the
logits to one token, a KV-cache corruption that replays a span again and again, a
detokenizer fed bytes that do not decode. A model that answers fluently but wrongly is not
garbage: that is for the expected answers of a prompt set and the quality gate.

Loops are looked for over tokens: the token ids when the engine returned them (vLLM's
`return_token_ids`), and always over the text cut into words (ASCII letters and digits up
to 32 at a time), runs of one punctuation character, and single other characters (each CJK
character is one). For every period p up to MAX_PERIOD, a run of positions with
seq[i] == seq[i + p] is a stretch of period p; it is a loop when it spans at least
MIN_LOOP_SPAN tokens and MIN_LOOP_REPEATS periods. A period costs a look at every k-th of
the at most MAX_TOKENS tokens examined (k, the matches a loop needs, is 31 to 128) plus a
walk along each match found: linear, with the constant MAX_PERIOD.

The thresholds are far above what fluent text does (a sentence said three times in a row
and 64 tokens long, the same token 32 times): the long-tail gate compares the rate of
flagged answers with the previous release's on the same prompts, so a prompt whose honest
answer trips a threshold (a list of 40 zeros) costs both releases alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ascendctl.promotion.finding import Finding

MAX_CHARS = 65_536       # the end of a longer answer is examined: loops run to max_tokens
MAX_TOKENS = 16_384
MAX_PERIOD = 64
MIN_LOOP_SPAN = 64
MIN_LOOP_REPEATS = 3
MIN_SAME_TOKEN_RUN = 32
MIN_SAME_CHAR_RUN = 120  # a ruler of '=' in a code comment stays under this
# an answer cut by max_tokens may end inside a UTF-8 sequence (at most 3 bytes decoded as
# U+FFFD): that is the length limit, not garbage
TRAILING_REPLACEMENTS = 3

# the kinds of a Finding here; its detail is never the answer's text: code points, counts
# and positions
EMPTY, UNPRINTABLE, REPEATED_CHARACTER, REPEATED_TOKEN, LOOP = (
    "empty", "unprintable", "repeated_character", "repeated_token", "loop")

# C0 and C1 controls but tab, newline and carriage return; lone surrogates; U+FFFD (bytes
# that did not decode); the noncharacters U+FFFE and U+FFFF
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffd\ufffe\uffff]")
_SAME_CHAR = re.compile(r"(.)\1{" + str(MIN_SAME_CHAR_RUN - 1) + ",}", re.DOTALL)
_TOKENS = re.compile(r"[A-Za-z0-9_]{1,32}|([^\w\s])\1*|\S")


@dataclass(frozen=True)
class AnswerCheck:
    findings: tuple[Finding, ...]
    examined_chars: int
    examined_tokens: int    # token ids examined (0 when none were given)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(f.kind for f in self.findings)


@dataclass(frozen=True)
class Loop:
    start: int          # index of the first token of the periodic stretch
    period: int
    span: int           # tokens covered

    @property
    def repeats(self) -> float:
        return self.span / self.period


def check_answer(text: str, token_ids: Optional[Sequence[int]] = None) -> AnswerCheck:
    window = text[-MAX_CHARS:]
    ids = list(token_ids[-MAX_TOKENS:]) if token_ids is not None else []
    findings: list[Finding] = []
    if not window.strip():
        findings.append(Finding(EMPTY, "no text" if not window else
                                f"only whitespace ({len(window)} characters)"))
        return AnswerCheck(tuple(findings), len(window), len(ids))
    bad = _unprintable(window)
    if bad is not None:
        findings.append(bad)
    run = _SAME_CHAR.search(window)
    if run is not None:
        length = _run_length(window, run.start())
        findings.append(Finding(REPEATED_CHARACTER, f"U+{ord(run.group(1)):04X} {length} "
                                f"times in a row at character {run.start()}"))
    words = [m.group(0) for m in _TOKENS.finditer(window)][-MAX_TOKENS:]
    for seq, unit in ((ids, "token ids"), (words, "words")):
        found = repetition(seq, unit)
        if found is not None:
            findings.append(found)
            break
    return AnswerCheck(tuple(findings), len(window), len(ids))


def repetition(seq: Sequence[object], unit: str) -> Optional[Finding]:
    """One token repeated, or the shortest-period loop in SEQ, as a finding."""
    same = stretch(seq, 1, MIN_SAME_TOKEN_RUN - 1)
    if same is not None:
        return Finding(REPEATED_TOKEN, f"one of the {unit} {same.span} times in a row from "
                                       f"position {same.start}")
    loop = find_loop(seq)
    if loop is not None:
        return Finding(LOOP, f"{unit} {loop.start}..{loop.start + loop.span - 1} repeat a "
                             f"period of {loop.period} ({loop.repeats:.1f} times)")
    return None


def find_loop(seq: Sequence[object]) -> Optional[Loop]:
    """A loop of the shortest period in SEQ, if any."""
    for period in range(1, min(MAX_PERIOD, len(seq) // MIN_LOOP_REPEATS) + 1):
        matches = max(MIN_LOOP_SPAN, MIN_LOOP_REPEATS * period) - period
        loop = stretch(seq, period, matches)
        if loop is not None:
            return loop
    return None


def stretch(seq: Sequence[object], period: int, matches: int) -> Optional[Loop]:
    """The first stretch of SEQ where seq[i] == seq[i + period] holds for at least MATCHES
    consecutive i. Such a run holds a multiple of MATCHES, so only those positions are
    tried, and a run is walked once from where it was found: O(len / MATCHES + run)."""
    last = len(seq) - period
    i = matches - 1
    while i < last:
        if seq[i] == seq[i + period]:
            start = end = i
            while start > 0 and seq[start - 1] == seq[start - 1 + period]:
                start -= 1
            while end + 1 < last and seq[end + 1] == seq[end + 1 + period]:
                end += 1
            if end - start + 1 >= matches:
                return Loop(start=start, period=period, span=end - start + 1 + period)
            i = end + 1 + (matches - 1 - (end + 1) % matches) % matches   # next one past the run
            continue
        i += matches
    return None


def _unprintable(text: str) -> Optional[Finding]:
    body = text.rstrip("\ufffd") if text.endswith("\ufffd") else text
    if len(text) - len(body) > TRAILING_REPLACEMENTS:
        body = text
    match = _UNPRINTABLE.search(body)
    if match is None:
        return None
    count = len(_UNPRINTABLE.findall(body))
    return Finding(UNPRINTABLE, f"{count} unprintable or undecodable character(s), the "
                                f"first U+{ord(match.group(0)):04X} at character "
                                f"{match.start()}")


def _run_length(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] == text[start]:
        end += 1
    return end - start
