"""The inventory's secret scanner and the doctor's redactor are linear in their input: a
1 MB value or log line of what each pattern feeds on (runs of its characters, its literal
repeated, its literal then a long run without the character that would end it, random
text) is scanned in well under a second. Before they were restructured, a 40 KB run of
letters took 10 s in the scanner and 11-13 s in the redactor (quadratic: a 1 MB one
would have taken hours)."""

from __future__ import annotations

import random
import string
import time

import pytest

from ascendctl.inventory.secretscan import find_secret
from ascendctl_runtime.doctor_node import REDACTED, redact

SIZE = 1_000_000
LIMIT_S = 1.0

# what the patterns start at and what their runs are made of
REPEATED = [
    "a", "a:", "a.", "a-", "a_", "_a", "a=", "a@", "a%", "-", "-a", "--a", " -a-a-a-a", " ",
    "=", "'", '"', "\\", '\\"', "[", "%", "%2", "?a",
    "x://", "x://a:", "://a:", "https://a:b",
    "sk-", "hf_", "ghp_", "github_pat_", "AKIA", "xoxb-", "glpat-",
    "eyJ-", "eyJ.", ".eyJ", "eyJaaaaaaaa.",
    "Bearer ", "basic a1", "-----BEGIN ", "-----BEGIN PRIVATE KEY-----",
    "token", "token ", "token=", 'token="', "token='", 'token=\\"', "token: [", "api_key",
    "api-", "b'", "--api-key ", "--api-key=", '"--api-key", ', " --api-k", "--hf_t ",
    "authorization: ", "authorization: bearer ", "cookie: a=", "api_key%3D",
]
# a literal, then a long run without the character that would complete the pattern
LITERAL_THEN_RUN = [
    ("x://a:", "b"), ("://", "a"), ("eyJ", "a"), ("eyJaaaaaaaaa.eyJ", "a"),
    ("token=", " "), ('token="', "a"), ("token: [", "a"), ("Bearer", " "), ("basic ", "a"),
    ("-----BEGIN ", "A"), ("-----BEGIN PRIVATE KEY-----", "A"), ("--api-key", " "),
    ("authorization:", " "), ("cookie: ", "a"), ("sk-", "a"), ("hf_", "a"), ("AKIA", "A"),
]


def random_text() -> str:
    chooser = random.Random(20240601)
    return "".join(chooser.choice(string.printable) for _ in range(SIZE))


INPUTS = {"random printable": random_text()}
INPUTS.update({f"{atom!r} repeated": (atom * (SIZE // len(atom) + 1))[:SIZE]
               for atom in REPEATED})
INPUTS.update({f"{literal!r} then {run!r}*": literal + run * SIZE
               for literal, run in LITERAL_THEN_RUN})


def timed(function, *args) -> float:
    """CPU seconds (not wall time: on a loaded machine a linear scan still costs the same
    CPU, while waiting for a core is no property of the code)."""
    started = time.process_time()
    function(*args)
    return time.process_time() - started


@pytest.mark.parametrize("name", list(INPUTS))
def test_the_scanner_reads_a_1mb_value_in_under_a_second(name):
    text = INPUTS[name]
    # a string value, a list of argv items made of it, and a key: every place it looks
    document = {"all": {"vars": {"custom": {"note": text, "argv": text.split(" ", 2000),
                                            text[:100_000]: 1}}}}
    assert timed(find_secret, document) < LIMIT_S


@pytest.mark.parametrize("name", list(INPUTS))
def test_the_redactor_reads_a_1mb_line_in_under_a_second(name):
    text = INPUTS[name]
    assert timed(redact, text, ["a-known-secret-value"]) < LIMIT_S


def test_the_scanner_finds_a_secret_at_the_end_of_a_1mb_value():
    """The same pathological text, with a real secret after it: found, not lost."""
    for filler in ("a", "x://a:", "eyJ-", "--a "):
        text = filler * (SIZE // len(filler)) + " --api-key Zq7v9Lm2Xc4Rt8Wb"
        found = find_secret({"custom": {"note": text}})
        assert found == (("custom", "note"), "a secret option (--api-key)"), filler


def test_the_redactor_removes_a_secret_at_the_end_of_a_1mb_line():
    for filler in ("a", "x://a:", "eyJ-", "token: ", "-----BEGIN "):
        text = filler * (SIZE // len(filler)) + "\nAuthorization: Bearer Zq7v9Lm2Xc4Rt8Wb\n"
        out = redact(text, [])
        assert "Zq7v9Lm2Xc4Rt8Wb" not in out and out.endswith(f"Bearer {REDACTED}\n"), filler
