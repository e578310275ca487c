"""The real serving engine in the lab: vLLM's CPU build serves the tiny model on one node
and answers a completion requested from the other node."""

from __future__ import annotations

import io
import json
import tarfile
import time

import pytest

pytestmark = pytest.mark.lab

UNIT = "lab-test-vllm"


def test_vllm_serves_tiny_model_across_nodes(lab, tmp_path):
    from ascendctl_lab.model import build_model

    model = tmp_path / "tiny"
    build_model(model)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(model, arcname="tiny")
    head, client = lab.nodes[0], lab.nodes[1]
    lab.exec(head.name, ["mkdir", "-p", "/srv/models"])
    lab.exec(head.name, ["tar", "-xf", "-", "-C", "/srv/models"], input=buf.getvalue())
    lab.exec(head.name, [
        "systemd-run", f"--unit={UNIT}", "--setenv=HF_HUB_OFFLINE=1",
        "--setenv=VLLM_CPU_OMP_THREADS_BIND=0",
        "/opt/vllm/bin/vllm", "serve", "/srv/models/tiny", "--host", head.mgmt_ip,
        "--port", "8000", "--max-model-len", "256", "--dtype", "bfloat16",
        "--kv-cache-memory-bytes", "64M", "--served-model-name", "tiny"])
    pid = lab.exec(head.name, ["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    assert pid.isdigit() and pid != "0"
    try:
        body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 8})
        answer = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            proc = lab.exec(client.name, ["curl", "-s", "-m", "20", "-H",
                                          "Content-Type: application/json", "-d", body,
                                          f"http://{head.mgmt_ip}:8000/v1/completions"],
                            check=False, timeout=60)
            if proc.returncode == 0 and '"choices"' in proc.stdout:
                answer = json.loads(proc.stdout)
                break
            assert lab.exec(head.name, ["systemctl", "is-active", UNIT],
                            check=False).stdout.strip() in ("active", "activating"), \
                lab.exec(head.name, f"journalctl -u {UNIT} --no-pager | grep -v -e nanobind "
                                    "-e 'leaked ' | tail -n 60",
                         check=False).stdout
            time.sleep(2)
        assert answer is not None, "no completion within 300 s"
        assert answer["usage"]["completion_tokens"] == 8
        assert answer["choices"][0]["text"]
    finally:
        lab.exec(head.name, ["kill", "-TERM", pid], check=False)
        for _ in range(60):
            if lab.exec(head.name, ["systemctl", "is-active", UNIT],
                        check=False).stdout.strip() not in ("active", "deactivating"):
                break
            time.sleep(1)
        lab.exec(head.name, ["systemctl", "reset-failed", UNIT], check=False)
