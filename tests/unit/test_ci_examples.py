"""The example CI pipelines (examples/gitlab, examples/github) are valid YAML, call only
stages that examples/ci/pipeline.sh knows, take secrets from the CI's secret store
through environment variables (never a command-line argument), and the shared script is
valid bash that rejects an unknown stage with exit 2 before running anything."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples/ci/pipeline.sh"
PIPELINES = [ROOT / "examples/gitlab/.gitlab-ci.yml", ROOT / "examples/github/ascendctl.yml"]


def script_stages() -> set[str]:
    return set(re.findall(r"^\s+([a-z]+)\)\s+run ", SCRIPT.read_text(), re.M))


def commands(node) -> list[str]:
    """Every shell line of a pipeline file (GitLab `script`/`before_script`, GitHub `run`)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("script", "before_script", "after_script", "run"):
                found += [value] if isinstance(value, str) else [str(v) for v in value]
            else:
                found += commands(value)
    elif isinstance(node, list):
        for item in node:
            found += commands(item)
    return found


def test_the_script_has_the_five_stages_and_is_valid_bash():
    assert script_stages() == {"preflight", "deploy", "status", "bench", "doctor"}
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert os.access(SCRIPT, os.X_OK)


def test_an_unknown_stage_fails_with_exit_2_and_runs_nothing(tmp_path):
    done = subprocess.run([str(SCRIPT), "nonsense"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, cwd=tmp_path,
                          env={**os.environ, "ASCENDCTL_INVENTORY": str(tmp_path / "inv.yaml"),
                               "ASCENDCTL": "/bin/false", "REPORTS": str(tmp_path / "r")})
    assert done.returncode == 2
    assert "unknown stage 'nonsense'" in done.stderr


def test_each_pipeline_runs_known_stages_with_secrets_from_the_environment():
    known = script_stages()
    for path in PIPELINES:
        data = yaml.safe_load(path.read_text())
        lines = commands(data)
        stages = {m for line in lines for m in re.findall(r"pipeline\.sh ([a-z]+)", line)}
        assert stages and stages <= known, (path.name, stages - known)
        assert {"preflight", "deploy", "bench"} <= stages, path.name
        for line in lines:
            # no secret value, key file or password on a command line
            assert not re.search(r"--(api-key|private-key|password|key-file)\b", line), line
            assert "sk-" not in line, line
        text = path.read_text()
        assert "VLLM_API_KEY" in text and "ASCENDCTL_SSH_KEY" in text, path.name
