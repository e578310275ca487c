"""The PD test corpus: vllm-ascend's multi-node PD configs and docs recipes, kept as data
in tests/fixtures/pd/ (each file names its upstream path and tag on its first line)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from ascendctl.pd.layout import PdLayout
from ascendctl.pd.upstream import load_pd_layout

PD_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pd"
# upstream configs that load and pass (warnings allowed), and docs recipes
CORPUS = sorted((PD_FIXTURES / "upstream").glob("*.yaml")) + \
    sorted((PD_FIXTURES / "recipes").glob("*.yaml"))
# upstream configs with a defect the loader refuses (tests/unit/test_pd_upstream.py)
REFUSED = sorted((PD_FIXTURES / "upstream-refused").glob("*.yaml"))
KV_PORT_GUIDE = PD_FIXTURES / "docs" / "mooncake-kv-port-guide.md"


@cache
def layout_of(path: Path) -> PdLayout:
    return load_pd_layout(path)


def reserved_ranges_from_guide() -> dict[int, range]:
    """The guide's table, NPUs per node → reserved port range (both ends inclusive in
    the table: `| 16 | 20000 - 35999 | >= 36000 |`)."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*-\s*(\d+)\s*\|\s*>=\s*(\d+)\s*\|",
                      KV_PORT_GUIDE.read_text(), re.MULTILINE)
    table = {int(npus): range(int(low), int(high) + 1) for npus, low, high, _ in rows}
    assert table, "the guide excerpt lost its table"
    return table


def fixture_text(path: Path) -> str:
    return path.read_text()


def kv_ports_written(path: Path) -> list[int]:
    """Every kv_port as written in the fixture's text, in file order."""
    return [int(p) for p in re.findall(r'"kv_port":\s*"?(\d+)', fixture_text(path))]


def npu_per_node_written(path: Path) -> int:
    match = re.search(r"^npu_per_node:\s*(\d+)", fixture_text(path), re.MULTILINE)
    assert match
    return int(match.group(1))
