"""With no terminal (a CI job on a jump host), every command either completes or fails
with a message; none waits for input.

Each command runs in the module's CLI runner (tests/unit/cli_runner.py: the real CLI in a
child Python, stdin /dev/null) with a timeout, against an inventory whose nodes are
loopback ports where nothing listens (so the commands that contact nodes fail fast, as
with a dead cluster). Commands that need consent (deploy, rollback, a play that restarts
engines) must refuse without --yes, naming it; they are also run as real processes with a
stdin pipe that stays open, which would hang a prompt until the timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from ascendctl.cli import _register_commands, app
from tests.conftest import free_port
from tests.unit.cli_runner import Hang

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TIMEOUT = 120
CONSENT = ("deploy", "rollback", "play", "node drain")
# Not run here: they build a lab and start engines (minutes). They never prompt (see
# test_no_command_calls_a_prompt); .ci/run and the lab tests run them without a terminal.
NOT_RUN = {"demo": "brings up a lab and deploys", "lab up": "boots lab nodes",
           "lab engine-image": "writes a 4 GB image archive from the lab image"}


def registered_commands() -> set[str]:
    _register_commands()

    def walk(command, prefix=()):
        if hasattr(command, "commands"):
            if getattr(command, "invoke_without_command", False):   # `doctor` runs alone too
                yield " ".join(prefix)
            for name, sub in command.commands.items():
                yield from walk(sub, prefix + (name,))
        else:
            yield " ".join(prefix)

    return set(walk(typer.main.get_command(app)))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("noninteractive")
    data = yaml.safe_load((FIXTURES / "inventories" / "good.yaml").read_text())
    hosts = data["all"]["children"]["nodes"]["hosts"]
    for index, name in enumerate(("node0", "node1")):
        hosts[name].update({"ansible_host": "127.0.0.1", "ansible_port": free_port(),
                            "ip": f"127.0.0.{index + 1}"})
    data["all"]["vars"]["ssh"].update({"connect_timeout": 3, "connect_retries": 0})
    from ascendctl_lab.model import build_model

    build_model(tmp / "tiny")     # a real (tiny) checkpoint: preflight sizes the model
    data["all"]["vars"]["model"]["source"] = str(tmp / "tiny")
    inv = tmp / "inv.yaml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp / "empty").mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ASCENDCTL_") or k in ("ASCENDCTL_LAB_ROOT",)}
    env.update({"ASCENDCTL_PLAIN": "1", "TEST_API_KEY": "sk-" + "noninteractive0001"})
    return {"inv": str(inv), "tmp": tmp, "env": env}


def invocations(s) -> dict[str, list[str]]:
    inv, tmp = s["inv"], s["tmp"]
    lab = "ni-absent-lab"
    return {
        "plan": ["plan", "-i", inv],
        "play": ["play", str(ROOT / "playbooks" / "deploy.yaml"), "-i", inv],
        "render": ["render", "-i", inv, "--out", str(tmp / "render")],
        "preflight": ["preflight", "-i", inv],
        "facts": ["facts", "-i", inv],
        "deploy": ["deploy", "-i", inv],
        "rollback": ["rollback", "-i", inv],
        "history": ["history", "-i", inv],
        "status": ["status", "-i", inv],
        "events": ["events", "-i", inv],
        "bench": ["bench", "-i", inv, "--input-len", "8", "--output-len", "8"],
        "doctor": ["doctor", "-i", inv, "--bundle", str(tmp / "doctor.tar.gz")],
        "doctor explain": ["doctor", "explain",
                           str(FIXTURES / "doctor" / "lab_engine_journal_node0.log")],
        "lab down": ["lab", "down", "--name", lab],
        "lab status": ["lab", "status", "--name", lab],
        "lab exec": ["lab", "exec", "node0", "--name", lab, "--", "true"],
        "lab fault": ["lab", "fault", "node0", "mtu-mismatch", "--name", lab],
        "lab heal": ["lab", "heal", "--name", lab],
        "lab model": ["lab", "model", "--out", str(tmp / "model")],
        "lab image": ["lab", "image"],
        "inventory check": ["inventory", "check", "-i", inv],
        "engine release-set": ["engine", "release-set", "v0.23.0", "--json"],
        "engine identity": ["engine", "identity", "-i", inv],
        "inventory show": ["inventory", "show", "-i", inv],
        "weights manifest": ["weights", "manifest", str(tmp / "empty")],
        "weights plan": ["weights", "plan", "-i", inv],
        "weights push": ["weights", "push", "-i", inv],
        "weights verify": ["weights", "verify", "-i", inv],
        "weights link": ["weights", "link", "-i", inv, "--dest", str(tmp / "link")],
        "node drain": ["node", "drain", "node1", "--reason", "disk swap", "-i", inv],
        "node undrain": ["node", "undrain", "node1", "-i", inv],
        "node list": ["node", "list", "-i", inv],
        "pd check": ["pd", "check", str(ROOT / "tests/fixtures/pd/recipes/"
                                        "mooncake-multi-node-layerwise.yaml")],
    }


def run(args: list[str], env: dict, stdin) -> subprocess.CompletedProcess:
    process = subprocess.Popen([sys.executable, "-m", "ascendctl", *args], env=env,
                               stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"`ascendctl {' '.join(args)}` still running after {TIMEOUT}s without "
                    f"a terminal (waiting for input?)\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def test_every_command_is_covered(setup):
    assert registered_commands() == set(invocations(setup)) | set(NOT_RUN)


def test_every_command_completes_or_fails_with_a_message(setup, cli_runner):
    results = {}
    for name, args in invocations(setup).items():
        try:
            results[name] = cli_runner.run(args, cwd=ROOT, env=setup["env"], timeout=TIMEOUT)
        except Hang as hang:
            pytest.fail(f"{hang} without a terminal (waiting for input?)")
    problems = []
    for name, result in results.items():
        output = (result.stdout + result.stderr).strip()
        if result.returncode != 0 and not output:
            problems.append(f"{name}: exit {result.returncode} without a message")
        if "Traceback (most recent call last)" in result.stderr:
            problems.append(f"{name}: a traceback instead of a message:\n{result.stderr[-1500:]}")
        if re.search(r"\[y/N\]|Aborted!", output):
            problems.append(f"{name}: tried to ask a question: {output[-300:]}")
    assert problems == []
    # the commands that reach nodes say which node and that it is unreachable (exit 4)
    for name in ("preflight", "facts", "history", "status", "events", "bench", "doctor"):
        assert results[name].returncode == 4, (name, results[name].stderr[-500:])
        assert "node0" in results[name].stdout + results[name].stderr
    for name in CONSENT:
        result = results[name]
        assert result.returncode == 2, (name, result.stdout[-500:], result.stderr[-500:])
        assert "--yes" in result.stdout + result.stderr


@pytest.mark.parametrize("name", CONSENT)
def test_consent_is_refused_not_awaited_with_an_open_stdin(setup, name):
    result = run(invocations(setup)[name], setup["env"], stdin=subprocess.PIPE)
    assert result.returncode == 2 and "--yes" in result.stdout + result.stderr


def test_no_command_calls_a_prompt():
    """Questions are asked only through the playbook runner's confirm hook, which is None
    without a terminal; nothing else in the CLI reads stdin."""
    offenders = []
    for path in [*(ROOT / "ascendctl").rglob("*.py"), *(ROOT / "ascendctl_lab").rglob("*.py")]:
        if "/ascendctl_lab/sim/" in str(path):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\b(typer|click)\.(prompt|confirm)\(|(?<![\w.])input\(|"
                         r"sys\.stdin\.read", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == ["ascendctl/cli/playrun.py:34: return typer.confirm(question, "
                         "default=False, err=True)"]
    playrun = (ROOT / "ascendctl" / "cli" / "playrun.py").read_text()
    assert "confirm=ask if interactive else None" in playrun
