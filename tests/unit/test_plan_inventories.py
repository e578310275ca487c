"""Inventory variants built from inventory.example.yaml (shared by the plan/render tests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import yaml

from ascendctl.inventory import Inventory
from ascendctl.load import load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory.example.yaml"


def example_data() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def host_entry(rank: int, npus: int = 8, **extra: Any) -> dict[str, Any]:
    entry = {
        "ansible_host": f"198.18.100.{10 + rank}",
        "rank": rank,
        "ip": f"198.18.100.{10 + rank}",
        "nic": "enp189s0f0",
        "device_ips": [f"198.19.{100 + rank}.{10 + i}" for i in range(npus)],
    }
    entry.update(extra)
    return entry


def set_nodes(data: dict[str, Any], nodes: int, npus: int = 8, **extra: Any) -> None:
    data["all"]["children"]["ascend"]["hosts"] = {
        f"node{r}": host_entry(r, npus, **extra) for r in range(nodes)}


def make_inventory(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None,
                   name: str = "inventory.yaml") -> Inventory:
    data = copy.deepcopy(example_data())
    if edit is not None:
        edit(data)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(path, check_files=False)


def serving(data: dict[str, Any]) -> dict[str, Any]:
    return data["all"]["vars"]["serving"]


def model(data: dict[str, Any]) -> dict[str, Any]:
    return data["all"]["vars"]["model"]


def test_variants_load_with_the_requested_shape(tmp_path):
    def four_nodes(data):
        set_nodes(data, 4)
        serving(data)["data_parallel_size"] = 4

    inv = make_inventory(tmp_path, four_nodes)
    assert [h.rank for h in inv.hosts] == [0, 1, 2, 3]
    assert inv.serving.data_parallel_size == 4
    assert inv.hosts[3].device_ips[0] == "198.19.103.10"
