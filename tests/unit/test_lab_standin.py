"""The lab's stand-in engine, run as real processes on loopback with the command lines
ascendctl renders for a lab-shaped inventory (2 nodes, multi-node MP, PP2, API key)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ascendctl.load import load_inventory
from ascendctl.render import render_release
from ascendctl_lab import inventory as lab_inventory
from ascendctl_lab.image import VLLM_VERSION
from ascendctl_lab.standin import install as standin_install
from ascendctl_lab.standin.serve import VERSION
from ascendctl_runtime import probe
from ascendctl_runtime.nodeutil import parse_env_file
from tests.unit.test_plan_model import TINY_QWEN3
from tests.conftest import free_port

PROGRAM = Path(standin_install.PROGRAM)
API_KEY = "sk-test-" + "0123456789abcdef"
KEY_ENV = "ASCENDCTL_TEST_STANDIN_KEY"
START_S = "0.3"


@pytest.fixture()
def rendered(tmp_path, monkeypatch):
    """{node: (argv, env)} as the release's engine.json and env files give them, with
    the stand-in program as the engine and the release's model directory made real."""
    for name in ("id", "kh"):
        (tmp_path / name).write_text("")
    nodes = [{"name": f"node{r}", "mgmt_ip": f"127.0.0.{r + 1}", "rank": r, "nic": "lo",
              "device_ips": [f"198.19.1.{11 + 8 * r + p}" for p in range(8)]}
             for r in range(2)]
    data = lab_inventory.build(
        name="t", chip="910B3", npus=8, roce_mtu=4200, netmask="255.255.255.0",
        key=tmp_path / "id", known_hosts=tmp_path / "kh", nodes=nodes,
        roce_gateway="198.19.1.1", model_dir=tmp_path / "model",
        versions={"vllm": VLLM_VERSION}, engine=standin_install.ENGINE_PATH)
    data["all"]["vars"]["serving"].update(port=free_port(), master_port=free_port(),
                                          api_key={"env": KEY_ENV})
    path = tmp_path / "lab.yaml"
    lab_inventory.write(path, data)
    monkeypatch.setenv(KEY_ENV, API_KEY)
    inv = load_inventory(path)
    files = render_release(inv, release_id="r1", secrets={"api_key": API_KEY},
                           checkpoint_dtype="bfloat16")
    release = tmp_path / "release"
    (release / "model").mkdir(parents=True)
    (release / "model" / "config.json").write_text(json.dumps(TINY_QWEN3))
    out = {}
    for node, node_files in files.items():
        by_path = {f.path: f.content for f in node_files}
        argv = json.loads(by_path["engine.json"])["argv"]
        assert argv[0] == standin_install.ENGINE_PATH
        model = f"{inv.deploy.root}/releases/r1/model"
        argv = [str(PROGRAM)] + [str(release / "model") if a == model else a for a in argv[1:]]
        env = {**parse_env_file(by_path["engine.env"].decode()),
               **parse_env_file(by_path["secrets.env"].decode())}
        out[node] = (argv, env)
    return {"nodes": out, "port": inv.serving.port, "master_port": inv.serving.master_port}


class Engine:
    """One stand-in process; its stderr collected in a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = log
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=log.open("w"), env={"PATH": os.environ["PATH"], **env,
                                       "ASCENDCTL_STANDIN_START_S": START_S})

    def wait(self, timeout: float = 20) -> int:
        return self.process.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture()
def start(rendered, tmp_path):
    started: list[Engine] = []

    def run(node: str, *extra: str, env: dict | None = None) -> Engine:
        argv, node_env = rendered["nodes"][node]
        engine = Engine(argv + list(extra), {**node_env, **(env or {})},
                        tmp_path / f"{node}-{len(started)}.log")
        started.append(engine)
        return engine

    yield run
    for engine in started:
        engine.stop()


def request(port: int, path: str, key: str | None = None, body: dict | None = None,
            timeout: float = 5) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_serving(port: int, engine: Engine, guard_s: float = 20) -> float:
    """Seconds until /health answers; fails if the engine exits first."""
    started = time.monotonic()
    while True:
        assert engine.process.poll() is None, engine.text()
        try:
            if request(port, "/health", timeout=1)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        assert time.monotonic() - started < guard_s, engine.text()
        time.sleep(0.05)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_program_is_the_pinned_version_with_a_system_python_shebang():
    assert VERSION == VLLM_VERSION
    assert PROGRAM.read_text().startswith("#!/usr/bin/python3\n")
    out = subprocess.run([sys.executable, str(PROGRAM), "--version"], capture_output=True,
                         text=True, timeout=30)
    assert (out.returncode, out.stdout.strip()) == (0, VLLM_VERSION)


def test_the_gang_serves_through_the_key_only_after_every_follower_joined(rendered, start):
    port, master = rendered["port"], rendered["master_port"]
    head = start("node0")
    deadline = time.monotonic() + 10
    while not listening(master):          # the head listens for its followers at once
        assert head.process.poll() is None and time.monotonic() < deadline, head.text()
        time.sleep(0.05)
    time.sleep(float(START_S) * 3)
    assert not listening(port), "the API answers before the gang is complete"
    follower = start("node1")
    assert wait_serving(port, head) < 10
    assert follower.process.poll() is None

    assert request(port, "/v1/models")[0] == 401
    code, body = request(port, "/v1/models", key="wrong-key")
    assert (code, json.loads(body)) == (401, {"error": "Unauthorized"})
    code, body = request(port, "/v1/models", key=API_KEY)
    assert code == 200 and [m["id"] for m in json.loads(body)["data"]] == ["tiny"]
    prompt = {"model": "tiny", "prompt": "Hello", "max_tokens": 5, "temperature": 0}
    answers = [json.loads(request(port, "/v1/completions", API_KEY, prompt)[1])
               for _ in range(2)]
    assert answers[0]["choices"][0]["text"] == answers[1]["choices"][0]["text"]
    assert len(answers[0]["choices"][0]["text"].split()) == 5
    assert answers[0]["usage"]["completion_tokens"] == 5
    assert request(port, "/v1/completions", API_KEY, {**prompt, "model": "other"})[0] == 404

    # the readiness probe ascendctl runs on the head: models, a completion, a stream

    ready = probe.check_ready(probe.Engine("127.0.0.1", port, API_KEY, 10), "tiny",
                              stream=True, max_tokens=3)
    assert ready["ready"] is True, ready
    assert ready["stream"]["done"] and ready["stream"]["chunks"] == 3
    assert probe.serving_probe(probe.Engine("127.0.0.1", port, API_KEY, 10), "tiny")["ok"]
    metrics = probe.parse_metrics(request(port, "/metrics")[1].decode())
    assert metrics["vllm:generation_tokens_total"] == 5 + 5 + 3 + 3 + 1
    assert "vllm:kv_cache_usage_perc" in metrics
    assert "Application startup complete." in head.text()


def test_the_key_may_come_from_the_command_line_instead(rendered, start):
    port = rendered["port"]
    env = {"VLLM_API_KEY": ""}
    head = start("node0", "--api-key", "cli-key", env=env)
    start("node1", env=env)
    wait_serving(port, head)
    assert request(port, "/v1/models", key="cli-key")[0] == 200
    assert request(port, "/v1/models", key=API_KEY)[0] == 401
    assert request(port, "/health")[0] == 200      # not a guarded path


def test_the_head_dies_at_its_next_step_once_the_follower_is_gone(rendered, start):
    port = rendered["port"]
    head = start("node0", env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1"})
    follower = start("node1")
    wait_serving(port, head)
    follower.process.kill()
    time.sleep(1)
    assert head.process.poll() is None          # idle: nothing waits for the stage yet
    prompt = {"model": "tiny", "prompt": "Hello", "max_tokens": 2}
    with pytest.raises(OSError):                # the request never gets an answer
        request(port, "/v1/completions", API_KEY, prompt, timeout=15)
    assert head.wait() != 0
    assert "node rank 1" in head.text() and "did not answer" in head.text()


def test_killing_the_head_ends_the_follower(rendered, start):
    head, follower = start("node0"), start("node1")
    wait_serving(rendered["port"], head)
    head.process.kill()
    assert follower.wait() != 0
    assert "the head" in follower.text() and "went away" in follower.text()


def test_a_follower_started_first_waits_for_its_head(rendered, start):
    follower = start("node1")
    time.sleep(1.5)
    assert follower.process.poll() is None
    head = start("node0")
    wait_serving(rendered["port"], head)
    assert follower.process.poll() is None


def test_a_follower_gives_up_when_no_head_comes(rendered, start):
    follower = start("node1", env={"VLLM_ENGINE_READY_TIMEOUT_S": "1"})
    assert follower.wait() == 1
    assert "no head at 127.0.0.1" in follower.text()


def test_sigterm_is_a_clean_exit(rendered, start):
    head, follower = start("node0"), start("node1")
    wait_serving(rendered["port"], head)
    follower.process.send_signal(signal.SIGTERM)
    assert follower.wait() == 0
    lone = start("node1")
    deadline = time.monotonic() + 20
    while "vLLM stand-in" not in lone.text():      # its handlers are installed
        assert lone.process.poll() is None and time.monotonic() < deadline, lone.text()
        time.sleep(0.05)
    lone.process.send_signal(signal.SIGTERM)    # while it still waits for a head
    assert lone.wait() == 0


@pytest.mark.parametrize("extra, said", [
    (["--no-such-engine-flag"], "vllm: error: unrecognized arguments: --no-such-engine-flag"),
    (["--max-num-seqs", "many"], "vllm serve: error: argument --max-num-seqs: invalid int "
                                 "value: 'many'"),
    (["--distributed-executor-backend", "gloo"], "argument --distributed-executor-backend: "
                                                 "invalid choice: 'gloo'"),
])
def test_flags_are_as_strict_as_vllms(rendered, start, extra, said):
    for node in ("node0", "node1"):
        engine = start(node, *extra)
        assert engine.wait() == 2
        assert said in engine.text()
        assert not listening(rendered["master_port"])


def test_every_flag_ascendctl_renders_is_accepted_in_either_spelling(rendered, start,
                                                                   tmp_path):
    argv, _ = rendered["nodes"]["node0"]
    underscored = ["--" + a[2:].replace("-", "_") if a.startswith("--") else a for a in argv]
    assert underscored != argv
    extra = ["--enable-prefix-caching", "--enforce-eager", "--trust-remote-code",
             "--max-num-batched-tokens", "2k", "--gpu-memory-utilization", "0.5",
             "--compilation-config", '{"level": 0}', "--seed", "7",
             "--no-enable-expert-parallel", "--served-model-name", "tiny", "tiny-alias"]
    engine = Engine(underscored + extra, rendered["nodes"]["node0"][1],
                    tmp_path / "underscored.log")
    try:
        start("node1")
        wait_serving(rendered["port"], engine)
        code, body = request(rendered["port"], "/v1/models", key=API_KEY)
        assert [m["id"] for m in json.loads(body)["data"]] == ["tiny", "tiny-alias"]
    finally:
        engine.stop()


def test_installed_on_a_node_it_is_vllm_at_the_pinned_version(tmp_path):
    """The install script in a directory of this machine: the venv's python reports the
    vllm package as the preflight's python fact reads it (importlib.metadata)."""
    target = tmp_path / "standin"
    subprocess.run(["sh", "-c", standin_install.install_script(str(target))], check=True,
                   input=PROGRAM.read_text(), text=True, timeout=60)
    out = subprocess.run([str(target / "bin" / "python"), "-c",
                          "from importlib import metadata; print(metadata.version('vllm'))"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == VLLM_VERSION, out.stderr
    assert os.access(target / "bin" / "vllm", os.X_OK)
    again = subprocess.run(["sh", "-c", standin_install.install_script(str(target))],
                           input="#!/usr/bin/python3\n", text=True, timeout=60)
    assert again.returncode == 0
    assert (target / "bin" / "vllm").read_text() == "#!/usr/bin/python3\n"
