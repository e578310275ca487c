"""The option-drift corpus (issue 21, acceptance 3).

- Every removal, rename, split or deprecation of an option in the vllm-ascend release
  notes v0.18.0rc1 → v0.30.0rc2 (ascendctl/drift/data/option_removals.yaml; every note
  line scripts/extract_option_schema.py scanned, tests/fixtures/option_drift/
  release_note_lines.json, is classified there) is refused or warned for the release
  that announced it, and the message names the option, that release and the
  replacement. Whether the release accepts the option comes from the schema extracted
  from its code, not from the table: a schema that still listed a removed option would
  fail here.
- No `vllm serve` command or exported variable of a release's own tutorials
  (tests/fixtures/option_drift/tutorials.json, from each sdist's
  docs/source/tutorials/**.md) is refused for that release.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ascendctl.drift.guard import Argv, check_options
from ascendctl.drift.schema import load_schema

FIXTURES = Path(__file__).parent.parent / "fixtures" / "option_drift"
REMOVALS = Path(__file__).parents[2] / "ascendctl" / "drift" / "data" / "option_removals.yaml"
TABLE = yaml.safe_load(REMOVALS.read_text())
NOTE_LINES = json.loads((FIXTURES / "release_note_lines.json").read_text())["lines"]
TUTORIALS = json.loads((FIXTURES / "tutorials.json").read_text())["releases"]


def findings_for(entry: dict, release: str) -> list:
    schema = load_schema()
    name = entry["name"]
    if entry["kind"] == "flag":
        return check_options(schema, release, argvs=[Argv([name, "_"], ["argv", "argv"])])
    if entry["kind"] == "env":
        return check_options(schema, release, env=[(name, "env", None)])
    parent, _dot, child = name.partition(".")
    mapping = {parent: {child: 1}} if child else {name: True}
    return check_options(schema, release, additional_config=[(mapping, "config")])


def test_every_scanned_note_line_is_classified():
    classified = set()
    for entry in TABLE["options"] + TABLE["not_options"]:
        source = entry["source"]
        classified.update((source["sdist"], n) for n in
                          range(source["line"], source.get("to", source["line"]) + 1))
    missing = [f"{line['sdist']}:{line['line']}: {line['text'][:80]}" for line in NOTE_LINES
               if (line["sdist"], line["line"]) not in classified]
    assert not missing
    assert len(NOTE_LINES) >= 90


@pytest.mark.parametrize("entry", TABLE["options"],
                         ids=lambda e: f"{e['name']}@{e['release']}")
def test_release_note_removal_is_refused_or_warned_naming_release_and_replacement(entry):
    found = findings_for(entry, str(entry["release"]))
    assert found, f"{entry['name']} passes for vllm-ascend {entry['release']}"
    message = found[0].message
    assert entry["name"].rpartition(".")[2] in message
    assert f"v{entry['release']}" in message
    if entry.get("replacement"):
        assert entry["replacement"] in message
    else:
        assert "name no replacement" in message


# what the engine does with them, read from each release's code (docs/engine.md)
OUTCOMES = [
    # ≤ 0.26.0rc1: AscendConfig reads known keys with .get: the rest is ignored
    ("additional_config", "enable_sparse_c8", "0.23.0", "warn"),
    ("additional_config", "layer_sharding", "0.26.0rc1", "warn"),
    # ≥ 0.27.1rc1: AscendConfig is a pydantic dataclass with extra="forbid"
    ("additional_config", "enable_sparse_c8", "0.30.0rc1", "fatal"),
    ("additional_config", "enable_reduce_sample", "0.30.0rc1", "fatal"),
    ("additional_config", "finegrained_tp_config.olora_tensor_parallel_size", "0.28.0rc1",
     "fatal"),
    ("additional_config", "finegrained_tp_config.olora_tensor_parallel_size", "0.27.1rc1",
     "warn"),
    # argparse: an option vLLM does not register ends vllm serve with a usage error
    ("flag", "--kv-quant-dtype", "0.30.0rc1", "fatal"),
    ("flag", "--swap-space", "0.18.0", "fatal"),
    # environment variables are never refused without --fail-on-environ-validation
    ("env", "VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL", "0.21.0rc1", "warn"),
    ("env", "ASCEND_BUFFER_POOL", "0.23.0", "warn"),
]


@pytest.mark.parametrize("kind,name,release,outcome", OUTCOMES)
def test_fatal_or_ignored_follows_the_release(kind, name, release, outcome):
    found = findings_for({"kind": kind, "name": name}, release)
    assert [("fatal" if f.fatal else "warn") for f in found] == [outcome]


def test_history_is_per_release_not_linear():
    # 0.24.0rc1 and 0.25.1rc1 came from main before the split that 0.23.0rc1's branch had
    for release, accepted in (("0.23.0", False), ("0.24.0rc1", True), ("0.25.1rc1", True),
                              ("0.26.0rc1", False)):
        found = findings_for({"kind": "additional_config", "name": "enable_sparse_c8"}, release)
        assert (not found) == accepted, release


def test_options_a_release_still_reads_are_accepted_again_later_or_earlier():
    # c8_enable_reshape_optim: the v0.30.0rc1 notes remove it, 0.30.0rc1 still reads it
    found = findings_for({"kind": "additional_config", "name": "c8_enable_reshape_optim"},
                         "0.30.0rc1")
    assert [f.fatal for f in found] == [False] and "still reads it" in found[0].message
    assert not findings_for({"kind": "additional_config", "name": "c8_enable_reshape_optim"},
                            "0.29.0rc1")


KNOWN_REFUSALS = yaml.safe_load((FIXTURES / "tutorial_refusals.yaml").read_text())


def expected_refusals() -> set[tuple[str, str, str]]:
    releases = load_schema().releases
    expected = set()
    for entry in KNOWN_REFUSALS:
        first, _sep, last = str(entry["releases"]).partition("..")
        span = releases[releases.index(first):releases.index(last or first) + 1]
        expected |= {(release, entry["file"], entry["option"]) for release in span}
    return expected


def test_no_false_refusal_on_the_release_tutorials():
    """Each release's tutorials through the guard for that release: the only refusals are
    the stale or mistyped options tutorial_refusals.yaml names with the code that refuses
    them; every other command and export passes (warnings allowed)."""
    schema = load_schema()
    refused = set()
    for release, pages in TUTORIALS.items():
        for page in pages:
            argvs = [Argv(c["argv"], [c["line"]] * len(c["argv"])) for c in page["commands"]]
            env = [(e["name"], e["line"], None) for e in page["env"]]
            for finding in check_options(schema, release, argvs=argvs, env=env):
                if finding.fatal:
                    assert finding.option.split(":", 1)[1].rpartition(".")[2] in finding.message
                    refused.add((release, page["file"], finding.option))
    assert refused == expected_refusals()


def test_tutorial_corpus_covers_every_release():
    schema = load_schema()
    assert set(TUTORIALS) == set(schema.releases)
    counts = Counter({r: sum(len(p["commands"]) for p in pages)
                      for r, pages in TUTORIALS.items()})
    assert min(counts.values()) >= 50, counts
