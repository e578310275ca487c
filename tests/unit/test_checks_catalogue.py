"""The check catalogue: ids, documentation, selection, the matrix data, import weight."""

import re
import subprocess
import sys
from pathlib import Path


from ascendctl.checks import SPECS, Severity, load_matrix, selected
from ascendctl.facts.versions import parse_version

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checks.md"


def test_at_least_thirty_checks_with_text():
    assert len(SPECS) >= 30
    for spec in SPECS.values():
        assert re.fullmatch(r"[a-z0-9]+(\.[a-z0-9_]+)+", spec.id), spec.id
        assert spec.category and spec.title and spec.catches and spec.remediation
        assert spec.severity in (Severity.FAIL, Severity.WARN) and spec.scope in ("node", "cluster")


def test_docs_list_every_check_with_its_severity():
    text = DOCS.read_text(encoding="utf-8")
    for spec in SPECS.values():
        row = next((l for l in text.splitlines() if l.startswith(f"| `{spec.id}` |")), None)
        assert row is not None, f"{spec.id} missing from docs/checks.md"
        assert f"| {spec.severity.value} |" in row and f"| {spec.scope} |" in row


def test_selection_by_id_and_category():
    assert selected(only=["roce.mtu"]) == ["roce.mtu"]
    roce = selected(only=["roce"])
    assert "roce.mtu.uniform" in roce and all(i.startswith("roce.") for i in roce)
    assert "npu.health" not in selected(skip=["npu"])
    assert "host.reachable" not in selected()        # produced by the executor


def test_matrix_data():
    m = load_matrix()
    row = m.release_for(parse_version("v0.18.0"))
    assert (row.vllm.text, row.cann.text, row.torch_npu.text, row.python_text) == ("0.18.0", "8.5.1", "2.9.0.post1",
                                                                                   "3.10-3.11")
    assert m.release_for(parse_version("0.17.0rc1")).torch_npu.text == "2.9.0"
    assert m.release_for(parse_version("0.23.0")).python_max == (3, 12)
    # one matrix: the checks read the engine's release sets (no second copy of the data)
    from ascendctl.releases.sets import load_matrix as release_sets
    assert [r.vllm_ascend.text for r in m.releases] == \
        [parse_version(r.vllm_ascend).text for r in release_sets().releases]
    assert m.release_for(parse_version("0.23.0")).hdk.text == "26.0.RC1"
    assert m.release_for(parse_version("0.18.0")).hdk is None          # unverified in the sets


def test_facts_and_checks_import_without_heavy_libraries():
    code = ("import sys, ascendctl.facts, ascendctl.checks\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('fabric', 'paramiko', 'rich', 'yaml', 'jinja2', 'pydantic', 'typer')]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
