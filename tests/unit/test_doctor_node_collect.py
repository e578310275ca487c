"""The node-side collector, run here for real against a deploy root on disk: it never
reads secrets.env into the bundle and redacts every secret value it knows of, through
the same stdin protocol the controller uses over SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ascendctl.transport.nodecall import BOOTSTRAP, call_stdin
from ascendctl_runtime import doctor_node as node_collect
from ascendctl.render.envfile import format_env_file

KEY_A = "sk-old-" + "a1b2c3d4e5f60718"
KEY_B = "sk-new-" + "9f8e7d6c5b4a3921"


def make_root(tmp_path):
    """A deploy root as `ascendctl deploy` leaves it: two releases, `current`, history."""
    root = tmp_path / "ascendctl"
    for release, key in (("r-000000000001", KEY_A), ("r-000000000002", KEY_B)):
        rel = root / "releases" / release
        (rel / "units").mkdir(parents=True)
        (rel / "secrets.env").write_text(format_env_file([("VLLM_API_KEY", key)], "secret"))
        os.chmod(rel / "secrets.env", 0o600)
        # an operator put the key into extra_args too: it must not leak from engine.json
        (rel / "engine.json").write_text(json.dumps(
            {"argv": ["vllm", "serve", "/m", "--api-key", key, "--port", "8000"]}))
        (rel / "engine.env").write_text(format_env_file([("HCCL_IF_IP", "198.18.1.11")]))
        (rel / "units" / "ascendctl-engine.service").write_text("[Service]\nExecStart=x\n")
        (rel / ".status").write_text("active\n")
    os.symlink("releases/r-000000000002", root / "current")
    (root / "history.jsonl").write_text(
        json.dumps({"event": "deployed", "release": "r-000000000002",
                    "note": f"Authorization: Bearer {KEY_A}"}) + "\n")
    return root


def test_known_secrets_are_every_release_s_key(tmp_path):
    root = make_root(tmp_path)
    assert sorted(node_collect.known_secrets(str(root))) == sorted([KEY_A, KEY_B])


def test_redact_removes_values_and_key_shaped_arguments():
    text = (f"vllm serve --api-key {KEY_A} --port 8000\n"
            "curl -H 'Authorization: Bearer tok-123456' http://x\n"
            "OPENAI_API_KEY=abc123def VLLM_API_KEY=\"zzz999\"\n"
            "non-default args: {'api_key': 'qwerty-42', 'port': 8000}\n"
            f"something else mentions {KEY_B} in passing\n"
            '{"argv": ["vllm", "serve", "--api-key", "json-key-77", "--port", "8000"]}\n')
    out = node_collect.redact(text, [KEY_B])
    for secret in (KEY_A, KEY_B, "tok-123456", "abc123def", "zzz999", "qwerty-42",
                   "json-key-77"):
        assert secret not in out
    assert out.count("[REDACTED]") == 7
    assert "--port 8000" in out and "'port': 8000" in out


def run_node_script(payload: dict) -> dict:
    """The same bootstrap the controller sends over SSH, run with this Python."""
    done = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP],
                          input=call_stdin("doctor_node", payload),
                          capture_output=True, timeout=180)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_collect_over_the_stdin_protocol_never_includes_secrets(tmp_path):
    root = make_root(tmp_path)
    answer = run_node_script({"op": "collect", "kwargs": {
        "root": str(root), "units": ["ascendctl-engine.service"], "since_s": 600,
        "ports": 2}})
    files = answer["files"]
    assert answer["redacted_values"] == 2
    assert not any(path.endswith("secrets.env") for path in files)
    blob = "\n".join(files.values())
    assert KEY_A not in blob and KEY_B not in blob
    assert '"--api-key", "[REDACTED]"' in files["state/release/engine.json"]
    assert files["state/current.txt"] == "r-000000000002\n"
    releases = json.loads(files["state/releases.json"])
    assert [(r["id"], r["current"]) for r in releases] == [("r-000000000001", False),
                                                            ("r-000000000002", True)]
    assert "Authorization: Bearer [REDACTED]" in files["state/history.jsonl"]
    # every kind of source is there, whether or not this machine has the tool
    assert {"journal/ascendctl-engine.service.log", "kernel/kernel.log",
            "npu/npu-smi-info.txt", "npu/hccn-port-0.txt", "npu/hccn-port-1.txt",
            "state/ports.txt", "state/release/engine.env",
            "state/release/units/ascendctl-engine.service"} <= set(files)
    assert answer["commands"]["npu/npu-smi-info.txt"]["argv"][1:] == ["info"]


def test_plog_tails_are_collected_from_the_process_log_path(tmp_path):
    root = make_root(tmp_path)
    plog = tmp_path / "plogs" / "debug" / "plog"
    plog.mkdir(parents=True)
    lines = [f"[INFO] HCCL(1,python3):line {i}" for i in range(50)]
    lines.append("[ERROR] HCCL(17528,python3):2026-03-18-10:33:52.113.403 "
                 "[hccl_socket_manager.cc:797] [18744][Wait][LinkEstablish]wait socket "
                 "establish timeout, role[1] rank[1] timeout[120 s]")
    (plog / "plog-17528_20260318.log").write_text("\n".join(lines) + "\n")
    old = tmp_path / "plogs" / "old.log"
    old.write_text("too old\n")
    os.utime(old, (1, 1))
    env = root / "releases" / "r-000000000002" / "engine.env"
    env.write_text(format_env_file([("ASCEND_PROCESS_LOG_PATH", str(tmp_path / "plogs"))]))
    collector = node_collect.Collector(str(root), since_s=3600, max_lines=10,
                                       max_bytes=1_000_000)
    collector.plogs(collector.process_log_dirs())
    label = str(tmp_path / "plogs").strip("/").replace("/", "_")
    text = collector.files[f"plog/{label}/debug/plog/plog-17528_20260318.log"]
    assert len(text.splitlines()) == 10 and "timeout[120 s]" in text.splitlines()[-1]
    assert not any(path.endswith("old.log") for path in collector.files)


def test_the_byte_budget_is_kept(tmp_path):
    collector = node_collect.Collector(str(tmp_path), since_s=60, max_lines=10, max_bytes=100)
    collector.add("a.txt", "x" * 80)
    collector.add("b.txt", "y" * 80)
    collector.add("c.txt", "z")
    assert collector.files == {"a.txt": "x" * 80, "b.txt": "y" * 20}
    assert len(collector.notes) == 2
