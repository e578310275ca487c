"""Golden files for every renderer on inventory.example.yaml, and byte-identical output.

Regenerate after an intended change with ASCENDCTL_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.load import load_inventory
from ascendctl.render import render_cluster, render_release
from tests.unit.test_plan_inventories import EXAMPLE, ROOT

GOLDEN = ROOT / "tests" / "golden" / "example"
RELEASE_ID = "golden"


def rendered_tree() -> dict[str, tuple[bytes, int]]:
    inv = load_inventory(EXAMPLE, check_files=False)
    tree = {}
    for node, files in render_release(inv, release_id=RELEASE_ID).items():
        for item in files:
            tree[f"{node}/{item.path}"] = (item.content, item.mode)
    for item in render_cluster(inv):
        tree[f"cluster/{item.path}"] = (item.content, item.mode)
    return tree


def test_every_renderer_matches_its_golden_file():
    tree = rendered_tree()
    if os.environ.get("ASCENDCTL_UPDATE_GOLDEN") == "1":
        for rel, (content, _) in tree.items():
            target = GOLDEN / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    golden = {str(p.relative_to(GOLDEN)): p.read_bytes()
              for p in GOLDEN.rglob("*") if p.is_file()}
    assert sorted(golden) == sorted(tree), "rendered file set differs from tests/golden"
    for rel, (content, _) in tree.items():
        assert content == golden[rel], f"{rel} differs from tests/golden/example/{rel}"
    # every kind of renderer is covered
    kinds = {"hccl.json", "engine.json", "engine.env", "secrets.env", "watchdog.json",
             "ascendctl-engine.service", "ascendctl-exporter.service",
             "ascendctl-watchdog.service", "ascendctl.conf", "prometheus.yml",
             "ascendctl-rules.yml", "agent.json", "supervisor.json",
             "ascendctl-supervisor.service"}
    assert kinds <= {Path(rel).name for rel in tree}


def test_secret_files_are_0600_and_others_0644():
    for rel, (_, mode) in rendered_tree().items():
        assert mode == (0o600 if rel.endswith("secrets.env") else 0o644), rel


@pytest.mark.parametrize("seed", ["1", "2"])
def test_cli_output_is_byte_identical(tmp_path, seed):
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run
        env = dict(os.environ, PYTHONHASHSEED=seed if run == "a" else str(int(seed) + 10))
        subprocess.run([sys.executable, "-m", "ascendctl", "render", "-i", str(EXAMPLE),
                        "--out", str(out)], check=True, capture_output=True, env=env)
        outs.append({str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mode & 0o777)
                     for p in out.rglob("*") if p.is_file()})
    assert outs[0] == outs[1]
    assert outs[0]["node0/secrets.env"][1] == 0o600
    assert b"redacted" in outs[0]["node0/secrets.env"][0]


def test_show_secrets_resolves_the_reference(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, ASCENDCTL_API_KEY="key-from-env")
    subprocess.run([sys.executable, "-m", "ascendctl", "render", "-i", str(EXAMPLE),
                    "--out", str(out), "--show-secrets"], check=True, capture_output=True,
                   env=env)
    secret = out / "node1" / "secrets.env"
    assert b'VLLM_API_KEY="key-from-env"' in secret.read_bytes()
    assert secret.stat().st_mode & 0o777 == 0o600
    leaked = [p for p in out.rglob("*") if p.is_file() and p != secret
              and p.name != "secrets.env" and b"key-from-env" in p.read_bytes()]
    assert leaked == []
