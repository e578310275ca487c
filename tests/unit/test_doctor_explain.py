"""`ascendctl doctor explain FILE`: a saved log explained offline, through the real CLI
(in the module's CLI runner, tests/unit/cli_runner.py; a real process for standard input
and the environment; real files and pipes) and through its library.

The logs are built from real lines: the lab's captured journals and the public lines of
tests/fixtures/doctor/public_lines.yaml.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascendctl.doctor.explain import explain_log
from ascendctl.doctor.logfile import LogReader
from ascendctl.doctor.signatures import default_signatures
from tests.unit.cli_runner import module_runner

ROOT = Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "tests/fixtures/doctor"
PUBLIC = yaml.safe_load((DOCTOR / "public_lines.yaml").read_text())
TIMEOUT = 120


def public_line(sig_id: str, source: str) -> str:
    return next(item["line"] for item in PUBLIC[sig_id]["lines"] if item["source"] == source)


def journal(node: str) -> str:
    text = (DOCTOR / f"lab_engine_journal_{node}.log").read_text()
    return "".join(text.splitlines(keepends=True)[1:])      # without the `# source:` line


def healthy_lines() -> list[str]:
    """The lab head's healthy start-up (no signature in it)."""
    lines = journal("node0").splitlines()
    return lines[:next(i for i, line in enumerate(lines) if "Stopping ascendctl-engine" in line)]


def run(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
    """`doctor explain ARGS` in the module's runner (stdin /dev/null), or with DATA as a
    process of its own reading DATA on its standard input."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDCTL_")}
    env["ASCENDCTL_PLAIN"] = "1"
    if data is not None:
        return subprocess.run([sys.executable, "-m", "ascendctl", "doctor", "explain", *args],
                              input=data, capture_output=True, timeout=TIMEOUT, env=env,
                              cwd=ROOT)
    done = module_runner().run(["doctor", "explain", *args], cwd=ROOT, env=env, timeout=TIMEOUT)
    return subprocess.CompletedProcess(args, done.returncode, done.stdout.encode(),
                                       done.stderr.encode())


def explain_text(text: str | bytes, **reader):
    data = text.encode() if isinstance(text, str) else text
    return explain_log(LogReader(io.BytesIO(data), name="log", **reader), default_signatures())


@pytest.fixture
def ticket_log(tmp_path):
    """A log pasted into a ticket: a healthy start, then a stuck collective (timeout with
    its unit), the torch_npu wrapper code, the engine's death, and an info line."""
    lines = healthy_lines()[:40]
    lines.append(public_line("DS-24", "vllm-project/vllm-ascend#10815"))
    lines.append(public_line("DS-05", "Ascend/pytorch#54"))
    lines.append(public_line("DS-27", "vllm-project/vllm-ascend#3141"))
    lines += healthy_lines()[40:45]
    lines.append(public_line("DS-26", "vllm-project/vllm-ascend#7384"))
    lines.append(public_line("DS-05", "InternLM/lmdeploy#3354"))
    path = tmp_path / "ticket.log"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def test_a_pasted_log_is_explained_line_by_line(ticket_log):
    path, lines = ticket_log
    result = run(str(path), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["lines"] == len(lines) and report["bytes"] == path.stat().st_size
    found = {f["id"]: f for f in report["findings"]}
    assert set(found) == {"DS-05", "DS-27", "DS-26", "DS-24"}
    stuck = found["DS-05"]
    # line numbers from 1, counted independently here
    where = [i + 1 for i, line in enumerate(lines) if "hccl fftsplus task timeout" in line]
    assert stuck["count"] == 2 and [m["line"] for m in stuck["matches"]] == where
    assert stuck["first_line"] == where[0]
    # the unit is read: timeout:30min(default) is 1800 s, timeout:1836 is 1836 s
    assert [m["values"]["timeout_s"] for m in stuck["matches"]] == [1800, 1836]
    assert stuck["matches"][0]["values"]["timeout_default"] == "(default)"
    assert stuck["cause"] and stuck["fix"] and stuck["root_cause"]
    assert "timeout:30min(default)" in stuck["matches"][0]["text"]
    # errors first, in log order; the consequence is not the root cause
    assert [f["id"] for f in report["findings"]] == ["DS-05", "DS-27", "DS-26", "DS-24"]
    assert found["DS-26"]["umbrella"] and not found["DS-26"]["root_cause"]
    assert found["DS-24"]["severity"] == "info"
    assert found["DS-24"]["matches"][0]["values"]["waited_s"] == 60
    assert report["summary"] == {"errors": 3, "warnings": 0, "info": 1,
                                 "root_cause": {"id": "DS-05", "line": where[0]},
                                 "verdict": report["summary"]["verdict"]}
    assert report["exit_code"] == 1 and "DS-05 at line" in report["summary"]["verdict"]


def test_the_text_output_names_line_fields_cause_and_fix(ticket_log):
    path, lines = ticket_log
    result = run(str(path))
    out = result.stdout.decode()
    assert result.returncode == 1, result.stderr
    first = next(i + 1 for i, line in enumerate(lines) if "30min(default)" in line)
    assert f"ERROR DS-05 Device-side HCCL execution timeout (stuck collective) — 2 line(s): {first}, " in out
    assert "timeout_s=1800" in out and "probable root cause" in out
    assert out.count("   cause: ") == 3 and out.count("   fix:   ") == 3  # info is apart
    assert "info: DS-24" in out
    assert result.stderr == b""


def test_standard_input_gives_the_same_explanation(ticket_log):
    path, _ = ticket_log
    from_file = json.loads(run(str(path), "--json").stdout)
    piped = run("-", "--json", data=path.read_bytes())
    assert piped.returncode == 1
    from_stdin = json.loads(piped.stdout)
    assert from_stdin["findings"] == from_file["findings"]
    assert from_stdin["source"] == "<stdin>"


def test_exit_codes_follow_the_doctor(tmp_path):
    assert explain_text("\n".join(healthy_lines())).exit_code == 0      # nothing known
    info = public_line("DS-24", "vllm-project/vllm-ascend#10815")
    assert explain_text(info).exit_code == 0                           # info only
    warning = public_line("DS-30", "vllm-project/vllm#12474")
    assert explain_text(info + "\n" + warning).exit_code == 3          # warnings only
    log = tmp_path / "log"
    log.write_text(warning + "\n" + public_line("DS-28", "gpustack/gpustack#6221") + "\n")
    result = run(str(log), "--json")
    assert result.returncode == 1
    found = {f["id"]: f for f in json.loads(result.stdout)["findings"]}
    assert found["DS-28"]["matches"][0]["values"] == {"engine": "1", "need": "not use"}
    assert found["DS-28"]["root_cause"] and found["DS-30"]["severity"] == "warning"


def test_secrets_in_the_log_are_redacted_in_the_output(tmp_path):
    key, token = "sk-" + "ticketpaste00042", "hf_" + "A" * 30
    log = tmp_path / "with-secrets.log"
    log.write_text(
        f"vllm: error: unrecognized arguments: --api-key {key} --hf-token {token}\n"
        f"ERROR 09-06 04:14:11 [core.py:640] TimeoutError: RPC call to execute_model "
        f"timed out. Authorization: Bearer {key}\n")
    outputs = {}
    for args in ((str(log), "--json"), (str(log),)):
        result = run(*args)
        out = outputs[args] = result.stdout.decode() + result.stderr.decode()
        assert result.returncode == 1
        assert key not in out and token not in out and "ticketpaste" not in out
        assert "[REDACTED]" in out
    report = json.loads(outputs[(str(log), "--json")])
    found = {f["id"]: f for f in report["findings"]}
    args = found["DS-36"]["matches"][0]["values"]["args"]
    assert args.startswith("--api-key [REDACTED]") and "--hf-token" in args
    assert found["DS-38"]["matches"][0]["values"] == {"method": "execute_model"}


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as handle:              # sparse: 16 GiB + 1 byte, nothing written
        handle.truncate((16 << 30) + 1)
    cases = {
        str(tmp_path / "missing.log"): "file not found",
        str(tmp_path): "a directory, not a regular file",
        str(fifo): "a FIFO, not a regular file",
        "/dev/zero": "a device, not a regular file",
        str(huge): "too large for a log",
    }
    for path, message in cases.items():
        result = run(path)
        err = result.stderr.decode()
        assert result.returncode == 2, (path, err)
        assert err.startswith(f"error: {path}: ") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert result.stdout == b""


def test_no_inventory_is_needed_nor_read(tmp_path, ticket_log):
    path, _ = ticket_log
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDCTL_")}
    env.update({"ASCENDCTL_PLAIN": "1", "ASCENDCTL_INVENTORY": str(tmp_path / "absent.yaml")})
    result = subprocess.run([sys.executable, "-m", "ascendctl", "doctor", "explain", str(path)],
                            capture_output=True, timeout=TIMEOUT, env=env, cwd=ROOT)
    assert result.returncode == 1 and b"DS-05" in result.stdout
    bare = subprocess.run([sys.executable, "-m", "ascendctl", "doctor"], capture_output=True,
                          timeout=TIMEOUT, env={**env, "ASCENDCTL_INVENTORY": ""}, cwd=ROOT)
    assert bare.returncode == 2 and b"doctor explain FILE" in bare.stderr


def test_lines_are_counted_across_blocks_and_long_lines_are_cut():
    """Small blocks and a small line limit make every boundary happen: a line split over
    blocks, a line longer than the limit (matched on its start, the rest dropped), a line
    without its final newline, CRLF endings and bytes that are not UTF-8."""
    error = public_line("DS-12", "vllm-project/vllm#11617")
    lines = [b"first", error.encode() + b"\r", b"\xff\xfe not utf-8 " + error.encode(),
             error.encode() + b" " + b"x" * 300 + b" " + error.encode(),   # cut at 100 bytes
             b"y" * 1000,                                                   # cut, no match
             error.encode()]
    data = b"\n".join(lines)                       # no final newline
    result = explain_text(data, block=7, max_line=100)
    assert result.lines == 6 and result.cut_lines == 2 and result.bytes == len(data)
    [finding] = result.findings
    assert finding.id == "DS-12" and [m.line for m in finding.matches] == [2, 3, 4, 6]
    assert finding.matches[1].text.startswith("\ufffd\ufffd not utf-8 OSError")
    assert not finding.matches[0].text.endswith("\r")


def test_a_line_past_the_limit_is_matched_on_its_first_mebibyte(tmp_path):
    error = public_line("DS-36", "vllm-project/vllm#34545")
    log = tmp_path / "long.log"
    with open(log, "wb") as handle:
        handle.write(b"a" * (5 << 20) + error.encode() + b"\n")        # past 1 MiB: dropped
        handle.write(b"b" * 1000 + error.encode() + b"c" * (3 << 20) + b"\n")
        handle.write(error.encode() + b"\n")
    report = json.loads(run(str(log), "--json").stdout)
    assert report["lines"] == 3 and report["cut_lines"] == 2
    [finding] = report["findings"]
    assert [m["line"] for m in finding["matches"]] == [2, 3]
    assert finding["matches"][1]["values"] == {"args": "--omni"}


def test_a_tls_switch_that_differs_within_the_log_is_reported():
    real = public_line("DS-34", "MindIE DeepSeek-V3 multi-node deployment doc "
                                "(tests/fixtures/hccn_tool_a2_checks_mindie_doc.txt)")
    same = "\n".join(real.replace("dev_id:0", f"dev_id:{port}") for port in range(8))
    assert explain_text(same).findings == []
    ports = [real.replace("dev_id:0", f"dev_id:{port}").replace(
        "tls switch[0]", f"tls switch[{1 if port == 5 else 0}]") for port in range(8)]
    [finding] = explain_text("\n".join(ports)).findings
    assert finding.id == "DS-34" and finding.count == 8 and finding.first_line == 6
    assert "tls=0 on 7 line(s) from line 1" in finding.cause
    assert finding.matches[0].values == {"dev": "5", "tls": "1"}


def test_a_long_matching_line_is_kept_short():
    """Only the first 4096 characters of a matching line are kept (and 400 shown), so 20
    kept matches of each signature stay small whatever the lines' length."""
    error = public_line("DS-36", "vllm-project/vllm#34545")
    [finding] = explain_text((error + " " + "z" * 100_000 + "\n") * 30).findings
    assert finding.count == 30 and len(finding.matches) == 20
    assert all(len(m.text) <= 402 and m.text.endswith(" …") for m in finding.matches)
    # the field is cut to the line's first 1000 characters by the regex, and shown
    assert finding.matches[0].values["args"].startswith("--omni zzz")
