"""The shipped release-set matrix: its rows, lookups, nearest rows and image tags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascendctl.releases.sets import (
    CELLS, MatrixError, chip_variants, describe_row, load_matrix, match_versions,
    parse_matrix, parse_official_tag,
)
from ascendctl.facts.versions import parse_version


PYPI_LISTING = Path(__file__).parents[1] / "fixtures" / "pypi" / "vllm-ascend-index.txt"
MATRIX_FILE = Path(__file__).parents[2] / "ascendctl" / "releases" / "data" / "release_sets.yaml"


def pypi_versions() -> list[str]:
    """The versions of the recorded listing: `pip index versions` and the sdist files,
    which must agree."""
    text = PYPI_LISTING.read_text()
    assert text.startswith("# source: ")
    listed = next(line.split(":", 1)[1] for line in text.splitlines()
                  if line.startswith("#   Available versions:"))
    from_pip = {v.strip() for v in listed.split(",")}
    from_files = {line.split()[0][len("vllm_ascend-"):-len(".tar.gz")]
                  for line in text.splitlines() if line.startswith("vllm_ascend-")}
    assert from_pip == from_files and len(from_pip) > 40
    return sorted(from_pip, key=parse_version)


def matrix_data() -> dict:
    return yaml.safe_load(MATRIX_FILE.read_text())


def test_every_pypi_release_from_0_17_to_0_30_has_a_row():
    in_range = [v for v in pypi_versions()
                if (0, 17) <= parse_version(v).release[:2] <= (0, 30)]
    rows = [r.vllm_ascend for r in load_matrix().releases]
    assert rows == in_range
    assert len(rows) == 18 and load_matrix().newest.tag == "v0.30.0rc2"


def test_every_cell_names_a_source_defined_in_the_header():
    matrix = load_matrix()
    for row in matrix.releases:
        cells = row.cells(matrix.image_variants, matrix.image_repository)
        assert {c for c, _, _ in cells} >= set(CELLS), row.tag
        for cell, _, sources in cells:
            assert sources, (row.tag, cell)
            for source in sources:
                assert source in matrix.references or \
                    matrix.describe_source(source).startswith("vllm-ascend "), source
        for stack in row.image_stacks:
            assert stack.sources and all(matrix.describe_source(s) for s in stack.sources)
        # a value no source states is marked, not guessed, and says why
        for cell in row.unverified:
            assert row.notes[cell], (row.tag, cell)
        assert row.hdk.version is not None or row.hdk.unverified


@pytest.mark.parametrize("edit,words", [
    (lambda row: row["sources"].pop("nnal"), "['nnal'] missing"),
    (lambda row: row["sources"].update(nnal="notes@0.99.0"), "names no sdist"),
    (lambda row: row["sources"].update(nnal="rumour@0.18.0"), "unknown source"),
    (lambda row: row.update(nnal=None), "must be unverified"),
    (lambda row: row.update(tutorials={"qwen3.5-397b-a17b": "seed-banana"}), "unknown tutorial"),
    (lambda row: row["image_stacks"][0].pop("source"), "bad image stack"),
])
def test_the_loader_refuses_an_unsourced_or_unexplained_cell(edit, words):
    data = matrix_data()
    edit(next(r for r in data["releases"] if str(r["vllm_ascend"]) == "0.18.0"))
    with pytest.raises(MatrixError, match=re.escape(words)):
        parse_matrix(data)


@pytest.mark.parametrize("release,expected", [
    ("0.17.0rc1", {"vllm": "0.17.0", "cann": "8.5.1", "torch": "2.9.0", "torch_npu": "2.9.0",
                   "python": ("3.10", "3.11"), "nnal": "8.5.1", "mooncake": "v0.3.8.post1"}),
    ("v0.18.0", {"vllm": "0.18.0", "torch_npu": "2.9.0.post1+git4c901a4", "nnal": "8.5.1",
                 "triton_ascend": "3.2.0.dev20260322", "mooncake": "v0.3.9"}),
    ("0.21.0rc1", {"vllm": "0.21.0", "cann": "9.0.0", "python": ("3.10", "3.12")}),
    ("0.23.0.post1", {"vllm": "0.23.0", "cann": "9.1.0", "torch": "2.10.0",
                      "torch_npu": "2.10.0.post4", "triton_ascend": "3.2.2",
                      "python": ("3.10", "3.12"), "nnal": "9.1.0"}),
    ("0.24.0rc1", {"vllm": "0.24.0", "cann": "9.0.1", "torch_npu": "2.10.0.post2"}),
    ("0.26.0rc1", {"vllm": "0.26.0", "cann": "9.1.0", "nnal": "9.1.0"}),
    ("0.29.0rc1", {"vllm": "0.29.0", "cann": "9.1.0", "nnal": None}),
    ("0.30.0rc2", {"vllm": "0.30.0", "cann": "9.2.0", "image_python": "3.12"}),
])
def test_rows_hold_the_documented_versions(release, expected):
    row = load_matrix().find(release.lstrip("v"))
    assert row is not None
    for key, value in expected.items():
        assert getattr(row, key) == value, key
    if release.startswith("0.23"):
        assert row.hdk.version == "26.0.RC1" and not row.hdk.unverified


def test_torch_npu_builds_per_python_and_arch():
    row = load_matrix().find("0.18.0")
    builds = {(b.python, b.arch): b.version for b in row.torch_npu_builds}
    assert builds[("3.11", "aarch64")] == "2.9.0.post1+gitee7ba04"      # the A2 image's
    assert builds[("3.10", "aarch64")] == "2.9.0.post1+git4c901a4"      # the policy's
    assert len(builds) == 4


def test_a_build_of_another_python_is_not_in_the_set():
    ok = match_versions({"vllm_ascend": "0.18.0", "python": "3.11",
                         "torch_npu": "2.9.0.post1+gitee7ba04"})
    assert ok.row is not None and ok.row.tag == "v0.18.0"
    wrong = match_versions({"vllm_ascend": "0.18.0", "python": "3.11",
                            "torch_npu": "2.9.0.post1+git4c901a4"})
    assert wrong.row is None
    assert "the set's builds for Python 3.11: 2.9.0.post1+gitee7ba04 (Python 3.11 aarch64)" \
        in wrong.differs[0].reason


def test_later_v0_18_0_images_on_cann_9_are_in_the_set_but_not_mixed():
    row = load_matrix().find("0.18.0")
    stack = row.image_stacks[0]
    assert (stack.since, stack.overrides["cann"], stack.overrides["torch_npu"]) \
        == ("2026-05-20", "9.0.0", "2.9.0.post2")
    rebuilt = match_versions({"vllm_ascend": "0.18.0", "cann": "9.0.0",
                              "torch_npu": "2.9.0.post2"})
    assert rebuilt.row is not None and rebuilt.row.tag == "v0.18.0"
    mixed = match_versions({"vllm_ascend": "0.18.0", "cann": "9.0.0",
                            "torch_npu": "2.9.0.post1+git4c901a4"})
    assert mixed.row is None and len(mixed.differs) == 1


def test_the_v0_30_0rc1_image_on_cann_9_1_and_the_rc2_images_unstated_torch_npu():
    assert match_versions({"vllm_ascend": "0.30.0rc1", "cann": "9.1.0"}).row is not None
    assert match_versions({"vllm_ascend": "0.30.0rc2", "cann": "9.1.0"}).row is None
    # the rc2 images install a torch_npu daily snapshot no source names: refused by nothing
    snapshot = match_versions({"vllm_ascend": "0.30.0rc2", "torch_npu": "2.10.0.post9"})
    assert snapshot.row is not None
    assert match_versions({"vllm_ascend": "0.29.0rc1", "torch_npu": "2.10.0.post9"}).row is None


def test_scope_of_the_model_restricted_releases():
    matrix = load_matrix()
    for release in ("0.26.0rc1", "0.27.1rc1", "0.30.0rc1", "0.30.0rc2"):
        scope = matrix.find(release).scope
        assert scope.restricted is True and scope.models, release
        assert not any("qwen3.5" in f for m in scope.models for f in m.match), release
    assert [m.name for m in matrix.find("0.30.0rc1").scope.models] == [
        "DeepSeek V4.1", "GLM-5.3", "GLM-5.3-Flash", "Qwen3.8-27B"]
    assert matrix.find("0.23.0.post1").scope.restricted is False
    assert matrix.find("0.28.0rc1").scope.restricted is None        # no release notes


def test_tutorial_flags_per_release():
    matrix = load_matrix()

    def flags(release):
        tutorial = matrix.find(release).tutorials.get("qwen3.5-397b-a17b")
        return None if tutorial is None else (tutorial.args, dict(tutorial.speculative_config))

    assert flags("0.17.0rc1") is None
    assert flags("0.18.0") == (("--seed", "1024", "--async-scheduling"), {"enforce_eager": True})
    assert flags("0.20.2rc1") == (("--seed", "1024"), {"enforce_eager": True})
    assert flags("0.23.0") == (("--seed", "1024"), {})
    assert flags("0.26.0rc1") == (("--seed", "1024"), {"enforce_eager": True})
    assert flags("0.30.0rc2") == (("--seed", "1024"), {})


def test_release_set_cli_lists_every_cell_with_its_source():
    env = {"ASCENDCTL_PLAIN": "1", "PATH": "/usr/bin:/bin"}
    text = subprocess.run([sys.executable, "-m", "ascendctl", "engine", "release-set",
                           "--list"], capture_output=True, text=True, check=True, env=env)
    out = text.stdout
    for release in load_matrix().releases:
        assert f"vllm-ascend {release.tag} (" in out
    rows_text = out.split("\nsources:\n")[0]
    cell_lines = [line for line in rows_text.splitlines() if line.startswith("  ")
                  and not line.startswith(("  note ", "  drift")) and ": " not in line[:20]]
    assert len(cell_lines) >= 18 * len(CELLS)
    assert all(line.rstrip().endswith("]") for line in cell_lines)
    assert "  notes@0.30.0rc2: vllm-ascend docs/source/user_guide/release_notes.md" in out
    assert "  drift          images from 2026-05-20: cann 9.0.0, torch_npu 2.9.0.post2" in out
    data = json.loads(subprocess.run(
        [sys.executable, "-m", "ascendctl", "engine", "release-set", "--list", "--json"],
        capture_output=True, text=True, check=True, env=env).stdout)
    assert [r["vllm_ascend"] for r in data] == [r.vllm_ascend for r in load_matrix().releases]
    for row in data:
        assert set(row["sources"]) >= set(CELLS)
        for sources in row["sources"].values():
            assert sources and all(s["document"] for s in sources)


def test_unknown_release_is_not_found():
    assert load_matrix().find("0.19.9") is None


def test_exact_set_matches_and_prefix_pins_work():
    result = match_versions({"vllm_ascend": "0.23.0", "cann": "9.1", "python": "3.12",
                             "driver": "26.0.rc1", "torch_npu": "2.10.0.post4"})
    assert result.applies and result.row is not None and result.row.tag == "v0.23.0"


def test_post_release_of_torch_npu_is_not_the_plain_version():
    result = match_versions({"vllm_ascend": "0.23.0", "torch_npu": "2.10.0"})
    assert result.row is None and result.nearest.tag == "v0.23.0"
    assert [d.component for d in result.differs] == ["torch_npu"]


def test_old_driver_is_refused_against_a_known_hdk():
    result = match_versions({"vllm_ascend": "0.23.0", "driver": "25.3.rc1"})
    assert result.row is None
    assert result.differs[0].component == "driver"
    assert "older than the set's HDK 26.0.RC1" in result.differs[0].reason


def test_python_outside_the_range():
    result = match_versions({"vllm_ascend": "0.18.0", "python": "3.12"})
    assert result.row is None and result.differs[0].expected == "3.10-3.11"


def test_nearest_prefers_fewest_differences_then_the_pinned_release():
    # vLLM 0.23.0 with CANN 8.5.1: one difference from v0.23.0/.post1 (CANN), more from others
    result = match_versions({"torch_npu": "2.10.0.post4", "vllm": "0.23.0", "cann": "8.5.1"})
    assert result.nearest.vllm == "0.23.0"
    assert [d.component for d in result.differs] == ["cann"]
    pinned = match_versions({"vllm_ascend": "0.18.0", "vllm": "0.17.0"})
    assert pinned.nearest.tag in ("v0.18.0", "v0.17.0rc1") and len(pinned.differs) == 1


def test_no_ascend_component_means_no_set_applies():
    assert not match_versions({"vllm": "0.32.0", "cann": "8.5.1"}).applies


@pytest.mark.parametrize("reference,expected", [
    ("quay.io/ascend/vllm-ascend:v0.23.0", ("0.23.0", "a2")),
    ("quay.io/ascend/vllm-ascend:v0.23.0-a3", ("0.23.0", "a3")),
    ("quay.io/ascend/vllm-ascend:v0.23.0-a3-openeuler", ("0.23.0", "a3-openeuler")),
    ("quay.io/ascend/vllm-ascend:v0.18.0-openeuler", ("0.18.0", "a2-openeuler")),
    ("quay.io/ascend/vllm-ascend:v0.30.0rc2-310p", ("0.30.0rc2", "310p")),
    ("localhost/ascendctl-lab/vllm-cpu:v1", None),
])
def test_official_tags(reference, expected):
    tag = parse_official_tag(reference)
    assert (None if tag is None else (tag.vllm_ascend, tag.variant)) == expected


def test_image_tags_per_release_and_chip():
    matrix = load_matrix()
    row = matrix.find("0.18.0")
    tags = row.image_tags(matrix.image_variants)
    assert tags["a2"] == "v0.18.0" and tags["a3"] == "v0.18.0-a3" and "a5" not in tags
    assert "a5" in matrix.find("0.23.0").image_tags(matrix.image_variants)
    assert chip_variants("Ascend910_93") == ("a3", "a3-openeuler")
    assert "v0.23.0: vLLM 0.23.0, CANN 9.1.0" in describe_row(matrix.find("0.23.0"))
