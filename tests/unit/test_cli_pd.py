"""`ascendctl pd check`: vllm-ascend's own PD recipes pass (with the warnings where its docs
disagree), a layout one rule refuses exits 1 naming the rule, the file and the line, a file
that is not a PD layout exits 2; nothing is run or contacted."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pd"
NON_LAYERWISE = FIXTURES / "recipes" / "mooncake-multi-node-non-layerwise.yaml"
QWEN35 = FIXTURES / "recipes" / "qwen3.5-397b-a17b-pd.yaml"


def line_of(path: Path, text: str, nth: int = 0) -> int:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line][nth]


def test_the_docs_recipes_pass_and_the_reserved_range_is_a_warning(cli_runner, tmp_path):
    result = cli_runner.run(["pd", "check", NON_LAYERWISE, QWEN35, "--json"], cwd=tmp_path,
                            env=os.environ)
    assert result.returncode == 0, result.stderr
    assert result.events == (), result.events            # nothing started or contacted
    data = json.loads(result.stdout)
    assert data["refused"] == 0
    plain, qwen = data["layouts"]
    assert plain["findings"] == []
    assert [n["role"] for n in plain["nodes"]] == ["prefill", "prefill", "decode", "decode"]
    kv = [u for u in plain["nodes"][0]["ports"] if u["first"] == 36000]
    assert kv and not kv[0]["reserved"]          # the recipe's "kv_port": "36000"
    warned = {(f["rule"], f["line"]) for f in qwen["findings"]}
    assert ("pd.kv-port-range", line_of(QWEN35, "23010")) in warned
    assert {f["severity"] for f in qwen["findings"]} == {"warn"}


def test_a_decode_node_declared_a_producer_is_refused(cli_runner, tmp_path):
    text = NON_LAYERWISE.read_text()
    third = text.index('"kv_role": "kv_consumer"')
    bad = tmp_path / "bad-role.yaml"
    bad.write_text(text[:third] + '"kv_role": "kv_producer"'
                   + text[third + len('"kv_role": "kv_consumer"'):])
    junit = tmp_path / "pd.xml"
    result = cli_runner.run(["pd", "check", bad, "--junit", junit], cwd=tmp_path,
                            env=os.environ)
    assert result.returncode == 1, result.stdout + result.stderr
    line = line_of(bad, '"kv_role": "kv_producer"', nth=2)
    refused = [row for row in result.stdout.splitlines() if row.startswith("  refuse:")]
    assert refused and all("[pd.kv-role]" in row for row in refused), result.stdout
    assert f"{bad}:{line}:" in refused[0]
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert cases["pd.kv-role"].find("failure") is not None
    assert cases["pd.port-overlap"].find("failure") is None


def test_a_file_that_is_not_a_pd_layout_is_bad_input(cli_runner, tmp_path):
    bad = tmp_path / "not-pd.yaml"
    bad.write_text("deployment: 3\n")
    result = cli_runner.run(["pd", "check", bad], cwd=tmp_path, env=os.environ)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {bad}") and len(result.stderr.splitlines()) == 1
