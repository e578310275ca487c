"""The garbage/repetition detector (ascendctl/promotion/garbage.py) on text it did not
produce: every paragraph of this repository's documentation and answers in the style of an
instruct model must pass; constructed degenerate outputs must fail, each for its reason."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from ascendctl.promotion import garbage
from ascendctl.promotion.garbage import (
    EMPTY, LOOP, MAX_CHARS, REPEATED_CHARACTER, REPEATED_TOKEN, UNPRINTABLE, check_answer,
    stretch,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

ANSWERS = [
    " 391. To see why, multiply 17 by 20 to get 340, then 17 by 3 to get 51, and add them:"
    " 340 + 51 = 391.",
    "The capital of France is Paris. It has been the country's capital since the 10th "
    "century (with short interruptions) and is its largest city.",
    "Here is a function that reverses a list in place:\n\n```python\ndef reverse(items):\n"
    "    i, j = 0, len(items) - 1\n    while i < j:\n        items[i], items[j] = items[j], "
    "items[i]\n        i += 1\n        j -= 1\n    return items\n```\n\n"
    "# ==========================================================================\n"
    "It swaps the ends and walks inwards, so it runs in O(n) time and O(1) extra space.",
    "| model | TP | PP | tok/s |\n|-------|----|----|-------|\n| Qwen3-8B | 1 | 1 | 2100 |\n"
    "| Qwen3-32B | 4 | 1 | 1450 |\n| Qwen3.5-397B-A17B | 8 | 2 | 610 |\n",
    "北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心。它有三千多年的建城史。",
    '{"name": "ascendctl", "nodes": 2, "npus_per_node": 8, "ready": true, "ranks": [0, 1]}',
    "Steps:\n1. Stop the engine.\n2. Stop the exporter.\n3. Stop the watchdog.\n"
    "4. Start the engine.\n5. Start the exporter.\n6. Start the watchdog.",
    "No. No, it is not.",
    "Le château de Versailles, résidence des rois de France, est situé à l'ouest de Paris.",
    # an answer cut by max_tokens inside a multi-byte character
    "The word for 'thank you' in Japanese is ありがと\ufffd",
]


def paragraphs() -> list[str]:
    out = []
    for path in DOCS:
        out += [p for p in path.read_text().split("\n\n") if p.strip()]
    return out


def test_every_paragraph_and_page_of_the_documentation_passes():
    texts = paragraphs()
    assert len(texts) > 500
    flagged = [(t[:60], check_answer(t).findings) for t in texts if not check_answer(t).ok]
    assert flagged == []
    for path in DOCS:          # whole pages: long, with tables and code, up to MAX_CHARS
        assert check_answer(path.read_text()).ok, path


@pytest.mark.parametrize("text", ANSWERS, ids=range(len(ANSWERS)))
def test_normal_answers_pass(text):
    assert check_answer(text).ok, check_answer(text).findings


LOOPING = "The answer depends on the configuration of the cluster. "
DEGENERATE = [
    ("", EMPTY),
    ("  \n\t ", EMPTY),
    ("Paris is the capital of France." + " Paris is the capital of France." * 20, LOOP),
    (ANSWERS[1] + " " + LOOPING * 12, LOOP),                     # fluent, then a loop to the end
    ("I think that " + "the " * 60, REPEATED_TOKEN),
    ("Wow" + "!" * 300, REPEATED_CHARACTER),
    ("Answer:" + "\n" * 200, REPEATED_CHARACTER),
    ("我是一个人工智能助手。" * 20, LOOP),
    ("OK\x00\x00 done", UNPRINTABLE),
    ("caf\ufffd au lait with \ufffd\ufffd inside", UNPRINTABLE),
    ("a control character \x1b[31m in the text", UNPRINTABLE),
    ("ends with too many replacements \ufffd\ufffd\ufffd\ufffd", UNPRINTABLE),
]


@pytest.mark.parametrize("text, kind", DEGENERATE, ids=[k for _, k in DEGENERATE])
def test_degenerate_answers_fail_for_their_reason(text, kind):
    result = check_answer(text)
    assert not result.ok
    assert kind in result.kinds, result.findings
    for finding in result.findings:    # a report may print this: never the answer's text
        assert "Paris" not in finding.detail and "the the" not in finding.detail


def test_a_sentence_said_twice_is_not_a_loop_but_three_times_at_length_is():
    sentence = ("The deployment waits until every rank of the serving group reports ready "
                "before it sends the first request. ")
    assert check_answer(sentence * 2).ok
    result = check_answer(sentence * 4)
    assert result.kinds == (LOOP,)
    assert "period of 19" in result.findings[0].detail


def test_token_ids_find_what_the_text_hides():
    # the text looks varied but the ids repeat one token (e.g. a special token the
    # detokenizer skipped)
    text = "A normal looking answer."
    assert check_answer(text, list(range(100, 140))).ok
    assert check_answer(text, [100, 101] + [151643] * 40).kinds == (REPEATED_TOKEN,)
    rng = random.Random(1)
    period = [rng.randrange(150_000) for _ in range(17)]
    looping = check_answer(text, list(range(50)) + period * 5)
    assert looping.kinds == (LOOP,) and "token ids" in looping.findings[0].detail
    assert "period of 17" in looping.findings[0].detail


def test_input_is_bounded_and_time_is_linear():
    rng = random.Random(2)
    words = [p.split() for p in paragraphs()]
    flat = [w for ws in words for w in ws]
    big = " ".join(rng.choice(flat) for _ in range(100_000))     # some 700 kB of words
    ids = [rng.randrange(150_000) for _ in range(200_000)]
    started = time.monotonic()
    result = check_answer(big, ids)
    assert time.monotonic() - started < 1.0
    assert result.ok and result.examined_chars == MAX_CHARS
    assert result.examined_tokens == garbage.MAX_TOKENS
    # a loop at the end of a long answer is in the window examined
    assert check_answer(big + " " + LOOPING * 20).kinds == (LOOP,)


def test_stretch_agrees_with_a_plain_scan():
    rng = random.Random(3)

    def plain(seq, period, matches):
        run = 0
        for i in range(len(seq) - period):
            run = run + 1 if seq[i] == seq[i + period] else 0
            if run >= matches:
                return True
        return False

    for _ in range(3000):
        seq = [rng.randint(0, rng.randint(1, 3)) for _ in range(rng.randint(0, 150))]
        period, matches = rng.randint(1, 8), rng.randint(1, 20)
        found = stretch(seq, period, matches)
        assert (found is not None) == plain(seq, period, matches), (seq, period, matches)
        if found is not None:
            run = found.span - period
            assert run >= matches
            assert all(seq[i] == seq[i + period]
                       for i in range(found.start, found.start + run))
