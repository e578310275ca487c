"""The NPU exporter's exposition text, from real captured npu-smi output."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascendctl.facts.npu_smi import parse_npu_smi_info
from ascendctl_runtime.exporter import render_metrics
from ascendctl_runtime.npu import PortState

FIXTURES = Path(__file__).parent.parent / "fixtures"


def capture(name: str) -> str:
    """A fixture's text without its `# source:` line."""
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    assert lines[0].startswith("# source:")
    return "".join(lines[1:])


@pytest.fixture()
def idle_910b3_metrics() -> str:
    info = parse_npu_smi_info(capture("npu-smi_info_910B3_8npu_idle.txt"))
    ports = [PortState(i, link_up=(i != 3), net_health_ok=(i != 5)) for i in range(8)]
    return render_metrics(info, "", ports)


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in output")


def test_values_match_the_capture(idle_910b3_metrics):
    text = idle_910b3_metrics
    assert sample(text, "machine_npu_nums") == 8
    assert sample(text, "machine_healthy_npu_nums") == 8
    # NPU 0 row of the capture: "3389 / 65536", temperature 41, power 98.1, bus 0000:C1:00.0
    assert sample(text, "npu_chip_info_hbm_used_memory", id="0") == 3389
    assert sample(text, "npu_chip_info_hbm_total_memory", id="0") == 65536
    assert sample(text, "npu_chip_info_temperature", id="0") == 41
    assert sample(text, "npu_chip_info_power", id="0") == 98.1
    assert 'pcie_bus_info="0000:C1:00.0"' in text
    assert sample(text, "npu_chip_info_link_status", id="3") == 0
    assert sample(text, "npu_chip_info_link_status", id="2") == 1
    assert sample(text, "npu_chip_info_network_status", id="5") == 0


def test_unreadable_npu_smi_exports_only_up_zero():
    text = render_metrics(None, "dcmi module initialize failed. ret is -8005", [])
    assert sample(text, "ascendctl_npu_smi_up") == 0
    assert "machine_npu_nums" not in text


def test_promtool_accepts_the_exposition(idle_910b3_metrics):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: apt-get install prometheus (scripts/bootstrap does)"
    result = subprocess.run([promtool, "check", "metrics"], input=idle_910b3_metrics,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
