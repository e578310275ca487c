"""The node's load generator (ascendctl_runtime.loadgen) against a real local HTTP server
that replays streams recorded from a real vLLM engine (tests/fixtures/loadgen/), with
delays the test controls: the figures are asserted against the numbers those delays make."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ascendctl.benchmark.figures import parse_result
from ascendctl_runtime import loadgen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "loadgen"
COMPLETION = FIXTURES / "vllm_0.32.0_completion_stream.txt"
CHAT = FIXTURES / "vllm_0.32.0_chat_stream.txt"
KEY = "sk-loadgen-TEST-4f1c9a"
ROOT = Path(__file__).resolve().parents[2]


def recorded(path: Path) -> list[str]:
    """The SSE events of a recorded stream (its `# source:` line dropped)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0].startswith("# source: vLLM 0.32.0")
    return [event for event in "\n".join(lines[1:]).split("\n\n") if event.strip()]


def event_data(event: str) -> Any:
    data = event.removeprefix("data: ")
    return data if data == "[DONE]" else json.loads(data)


def is_token(event: str) -> bool:
    data = event_data(event)
    return isinstance(data, dict) and bool(data.get("choices"))


class Script:
    """What the server does with each request (tests set the fields)."""

    def __init__(self, events: list[str], ttft_s: float = 0.0, gap_s: float = 0.0):
        self.events = events
        self.ttft_s = ttft_s
        self.gap_s = gap_s
        self.mode = "ok"          # ok | 500 | 401-echo | cut | no-done | stall | error-event
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.closed_by_client = 0
        self.sent: dict[str, list[float]] = {}   # prompt → [received, token chunk writes...]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: Script

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        script = self.server.script     # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.sent = [time.perf_counter()]
        with script.lock:
            script.sent[json.dumps(body.get("prompt"))] = self.sent
            script.bodies.append(body)
            script.auth.append(self.headers.get("Authorization"))
            script.in_flight += 1
            script.max_in_flight = max(script.max_in_flight, script.in_flight)
        self.counted = True
        try:
            self.answer(script)
        except (BrokenPipeError, ConnectionResetError):
            with script.lock:
                script.closed_by_client += 1
        finally:
            self.done(script)
            self.close_connection = True

    def done(self, script: Script) -> None:
        """Out of the server's count before the answer's last event leaves: the client may
        start its next request as soon as it has read it."""
        if self.counted:
            self.counted = False
            with script.lock:
                script.in_flight -= 1

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def answer(self, script: Script) -> None:
        if script.mode in ("500", "401-echo"):
            code = 500 if script.mode == "500" else 401
            text = "Internal Server Error" if code == 500 else \
                f"bad key in header: {self.headers.get('Authorization')}"
            payload = json.dumps({"error": text}).encode()
            self.done(script)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if script.mode == "stall":
            self.wait_for_close(script)
            return
        time.sleep(script.ttft_s)
        first = True
        events = script.events
        if script.mode == "error-event":
            events = events[:2] + ['data: {"error": {"object": "error", "message": '
                                   '"engine dead", "code": 500}}', "data: [DONE]"]
        for n, event in enumerate(events):
            if script.mode in ("cut", "no-done") and n == 3:
                break
            if is_token(event):
                if not first:
                    time.sleep(script.gap_s)
                first = False
            if n == len(events) - 1:
                self.done(script)
            if is_token(event):
                # stamped before the write: once written, the client may read the chunk
                # before this thread runs again
                self.sent.append(time.perf_counter())
            self.chunk(event.encode() + b"\n\n")
        if script.mode == "cut":
            self.wfile.write(b"40\r\ndata: {\"choi")     # the connection dies mid-chunk
            self.wfile.flush()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def wait_for_close(self, script: Script) -> None:
        """Send nothing until the client goes away (how it hangs up is what is tested)."""
        sock = self.connection
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                try:
                    data = sock.recv(1024)
                except OSError:
                    data = b""
                if not data:
                    with script.lock:
                        script.closed_by_client += 1
                    return


@pytest.fixture
def server():
    servers = []

    def start(script: Script) -> int:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.script = script                # type: ignore[attr-defined]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return httpd.server_address[1]

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def requests(n: int, max_tokens: int = 12) -> list[tuple[str, dict[str, Any]]]:
    prompts = loadgen.random_prompts(512, n, 16, seed=7)
    return [loadgen.completion_request("tiny", prompt=p, max_tokens=max_tokens, ignore_eos=True,
                                       sampling={"temperature": 0}) for p in prompts]


# -- requests ---------------------------------------------------------------------------------

def test_random_prompts_are_deterministic_token_ids_above_the_special_ones():
    a = loadgen.random_prompts(512, 20, 64, seed=3)
    assert a == loadgen.random_prompts(512, 20, 64, seed=3)
    assert a != loadgen.random_prompts(512, 20, 64, seed=4)
    assert len(a) == 20 and all(len(p) == 64 for p in a)
    ids = {t for p in a for t in p}
    assert min(ids) >= loadgen.FIRST_TOKEN_ID and max(ids) < 512
    # walks the allowed ids in order from a random offset: no two prompts share a prefix
    assert len({p[0] for p in a}) > 15
    assert all((p[1] - p[0]) % (512 - loadgen.FIRST_TOKEN_ID) == 1 for p in a)
    with pytest.raises(ValueError, match="no token id"):
        loadgen.random_prompts(loadgen.FIRST_TOKEN_ID, 1, 4, seed=0)


def test_completion_request_bodies():
    path, body = loadgen.completion_request("m", prompt=[5, 6], max_tokens=9, ignore_eos=True,
                                            sampling={"temperature": 0.6, "top_k": 20,
                                                      "seed": 1})
    assert path == "/v1/completions"
    assert body == {"model": "m", "prompt": [5, 6], "max_tokens": 9, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True,
                    "temperature": 0.6, "top_k": 20, "seed": 1}
    path, body = loadgen.completion_request("m", messages=[{"role": "user", "content": "x"}],
                                            max_tokens=4, ignore_eos=False, sampling={})
    assert path == "/v1/chat/completions"
    assert body == {"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "max_completion_tokens": 4, "stream": True,
                    "stream_options": {"include_usage": True}}     # server's sampling
    with pytest.raises(ValueError, match="exactly one"):
        loadgen.completion_request("m", max_tokens=1, ignore_eos=False, sampling={})
    with pytest.raises(ValueError, match="stream"):
        loadgen.completion_request("m", prompt="x", max_tokens=1, ignore_eos=False,
                                   sampling={"stream": False})


# -- the figures --------------------------------------------------------------------------------

def test_replayed_vllm_stream_gives_the_timings_the_server_made(server):
    events = recorded(COMPLETION)
    assert sum(map(is_token, events)) == 12
    script = Script(events, ttft_s=0.20, gap_s=0.05)
    port = server(script)
    started = time.monotonic()
    reqs = requests(4)
    out = loadgen.run_load(port, KEY, reqs, concurrency=2, limit_s=30,
                           request_timeout_s=10, keep_text=True)
    elapsed = time.monotonic() - started
    assert out["hung"] is False
    records = out["requests"]
    assert [r["i"] for r in records] == [0, 1, 2, 3]
    text = "".join(event_data(e)["choices"][0]["text"] for e in events if is_token(e))
    server_gaps = []
    for r, (_path, body) in zip(records, reqs):
        assert r["error"] is None and r["status"] == 200
        assert r["output_tokens"] == 12 and r["prompt_tokens"] == 13     # the usage chunk's
        assert r["text"] == text == "Y LinzY Lin] texY LinzY Lin"
        # against the server's own clock (one process): when the request came in and when
        # each token chunk went out; the client can only see them later, and not much later
        received, *writes = script.sent[json.dumps(body["prompt"])]
        assert len(writes) == 12
        server_gaps += [b - a for a, b in zip(writes, writes[1:])]
        ttft, e2e = (writes[0] - received) * 1000, (writes[-1] - received) * 1000
        assert 200 <= ttft <= r["ttft_ms"] < ttft + 150
        # e2e to the last token chunk: ttft + 11 gaps of 50 ms
        assert 750 <= e2e <= r["e2e_ms"] < e2e + 150
        assert r["tpot_ms"] == pytest.approx((r["e2e_ms"] - r["ttft_ms"]) / 11)
        assert r["tpot_ms"] == pytest.approx((e2e - ttft) / 11, abs=8)
        assert r["tpot_ms"] >= 50 - 8
    # two at a time: the second pair starts when the first ends
    assert records[0]["start_s"] < 0.05 and records[1]["start_s"] < 0.05
    assert 0.75 <= records[2]["start_s"] < 1.1
    result = out["result"]
    assert result["completed"] == 4 and result["failed"] == 0 and result["num_prompts"] == 4
    assert result["total_output_tokens"] == 48 and result["total_input_tokens"] == 52
    assert 1.5 <= result["duration"] <= elapsed
    assert result["output_throughput"] == pytest.approx(48 / result["duration"])
    assert result["request_throughput"] == pytest.approx(4 / result["duration"])
    assert result["median_itl_ms"] == pytest.approx(np.median(server_gaps) * 1000, abs=8)
    assert result["p50_tpot_ms"] == pytest.approx(np.median(
        [r["tpot_ms"] for r in records]))
    assert result["p99_ttft_ms"] == pytest.approx(np.percentile(
        [r["ttft_ms"] for r in records], 99)) and result["max_concurrency"] == 2
    # the key went as a Bearer token, the body as completion_request made it
    assert script.auth == [f"Bearer {KEY}"] * 4
    assert script.bodies[0]["stream_options"] == {"include_usage": True}


def test_summary_is_numpys_statistics_over_the_successful_requests():
    rng = np.random.default_rng(0)
    ttft = rng.gamma(2.0, 40.0, 57).tolist()
    e2e = [t + 300 + 10 * k for k, t in enumerate(ttft)]
    tokens = [1 + k % 5 for k in range(57)]
    records = [{"i": k, "ttft_ms": ttft[k], "e2e_ms": e2e[k], "output_tokens": tokens[k],
                "tpot_ms": (e2e[k] - ttft[k]) / (tokens[k] - 1) if tokens[k] > 1 else None,
                "prompt_tokens": 10, "error": None} for k in range(57)]
    records.append({"i": 57, "ttft_ms": 1.0, "e2e_ms": 1e6, "tpot_ms": None,
                    "output_tokens": 3, "prompt_tokens": 10, "error": "HTTP 500: x"})
    itl = rng.exponential(0.02, 400).tolist()
    result = loadgen.bench_result(records, itl, 12.5, 8)
    tpots = [r["tpot_ms"] for r in records[:57] if r["tpot_ms"] is not None]
    assert len(tpots) < 57          # one-token answers have no TPOT (vLLM leaves them out)
    for metric, values in (("ttft", ttft), ("e2el", e2e), ("tpot", tpots),
                           ("itl", [g * 1000 for g in itl])):
        assert result[f"mean_{metric}_ms"] == pytest.approx(np.mean(values))
        assert result[f"median_{metric}_ms"] == pytest.approx(np.median(values))
        assert result[f"std_{metric}_ms"] == pytest.approx(np.std(values))
        for p in (50, 90, 99):
            assert result[f"p{p}_{metric}_ms"] == pytest.approx(np.percentile(values, p))
    assert result["completed"] == 57 and result["failed"] == 1
    assert result["total_output_tokens"] == sum(tokens)
    assert result["output_throughput"] == pytest.approx(sum(tokens) / 12.5)
    empty = loadgen.bench_result([records[-1]], [], 1.0, 1)      # vLLM: np.mean(x or 0)
    assert empty["completed"] == 0 and empty["p99_ttft_ms"] == 0.0


def test_summary_of_vllms_own_requests_is_vllms_summary():
    """vLLM's per-request data (--save-detailed, recorded on the lab) through bench_result:
    every figure vLLM wrote, to the last bits."""
    lines = (FIXTURES / "vllm_0.32.0_bench_serve_detailed.json.txt").read_text().split("\n", 1)
    assert lines[0].startswith("# source: vLLM 0.32.0")
    vllm = json.loads(lines[1])
    records, itl = [], []
    for i, (ttft, latency, tokens, prompt, gaps, error) in enumerate(zip(
            vllm["ttfts"], vllm["latencies"], vllm["output_lens"], vllm["input_lens"],
            vllm["itls"], vllm["errors"])):
        records.append({"i": i, "ttft_ms": ttft * 1000, "e2e_ms": latency * 1000,
                        "output_tokens": tokens, "prompt_tokens": prompt, "error": error or None,
                        "tpot_ms": (latency - ttft) * 1000 / (tokens - 1) if tokens > 1 else None})
        itl += gaps if not error else []
    ours = loadgen.bench_result(records, itl, vllm["duration"], vllm["max_concurrency"])
    shared = [k for k in vllm if k.endswith("_ms") or k in (
        "completed", "failed", "num_prompts", "duration", "request_throughput",
        "output_throughput", "total_token_throughput", "total_input_tokens",
        "total_output_tokens", "max_concurrency")]
    assert len(shared) == 34 and set(shared) <= set(ours)
    for key in shared:
        assert ours[key] == pytest.approx(vllm[key], rel=1e-12, abs=1e-12), key
    theirs, mine = parse_result(vllm).latency_ms, parse_result(ours).latency_ms
    assert set(theirs) == set(mine) == {"ttft", "tpot", "itl", "e2el"}
    for metric, stats in theirs.items():
        assert set(stats) == {"mean", "median", "std", "p50", "p90", "p99"}
        assert mine[metric] == pytest.approx(stats, rel=1e-12)


def test_parse_result_reads_the_result_unchanged(server):
    port = server(Script(recorded(COMPLETION), ttft_s=0.02, gap_s=0.005))
    out = loadgen.run_load(port, None, requests(3), 3, 30, 10, False)
    result = out["result"]
    figures = parse_result(result)
    assert figures.completed == 3 and figures.failed == 0 and figures.num_prompts == 3
    assert figures.duration_s == result["duration"]
    assert figures.output_throughput == result["output_throughput"]
    assert figures.total_output_tokens == 36 and figures.max_concurrency == 3
    assert set(figures.latency_ms) == {"ttft", "tpot", "itl", "e2el"}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert set(figures.latency_ms[metric]) == {"mean", "median", "std", "p50", "p90", "p99"}
        assert figures.latency(metric, "p99") == result[f"p99_{metric}_ms"]
    assert "text" not in out["requests"][0]        # keep_text off


def test_chat_stream_counts_usage_tokens_and_falls_back_to_chunks_with_text(server):
    events = recorded(CHAT)
    port = server(Script(events))
    chat = loadgen.completion_request("tiny", messages=[{"role": "user", "content": "Hi"}],
                                      max_tokens=5, ignore_eos=True, sampling={})
    out = loadgen.run_load(port, None, [chat], 1, 30, 10, True)
    record = out["requests"][0]
    assert record["error"] is None and record["output_tokens"] == 5      # usage
    assert record["prompt_tokens"] == 17 and record["text"] == " de de\ufffd cluster cluster"
    # vLLM's rule: the role chunk is a token chunk: 6 of them, 5 gaps
    without_usage = [e for e in events if "usage" not in e]
    port = server(Script(without_usage))
    out = loadgen.run_load(port, None, [chat], 1, 30, 10, False)
    assert out["requests"][0]["error"] is None
    assert out["requests"][0]["output_tokens"] == 4     # chunks with text, the fallback
    assert out["requests"][0]["prompt_tokens"] is None


# -- failures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, status, error", [
    ("500", 500, "HTTP 500: "),
    ("cut", 200, "IncompleteRead"),
    ("no-done", 200, "the stream ended without [DONE]"),
    ("error-event", 200, "error in the stream: engine dead"),
])
def test_failed_requests(server, mode, status, error):
    script = Script(recorded(COMPLETION))
    script.mode = mode
    port = server(script)
    out = loadgen.run_load(port, KEY, requests(2), 2, 30, 10, False)
    assert out["hung"] is False
    for record in out["requests"]:
        assert record["status"] == status and error in record["error"]
        assert record["tpot_ms"] is None
    assert out["result"]["completed"] == 0 and out["result"]["failed"] == 2
    assert parse_result(out["result"]).failed == 2


def test_timeout_and_connection_refused(server):
    script = Script(recorded(COMPLETION))
    script.mode = "stall"
    port = server(script)
    started = time.monotonic()
    out = loadgen.run_load(port, None, requests(2), 2, 30, 0.5, False)
    assert time.monotonic() - started < 1.5
    assert [r["error"] for r in out["requests"]] == ["timed out after 0.5 s"] * 2
    assert all(0.5 <= r["e2e_ms"] < 1200 for r in out["requests"])
    assert out["hung"] is False
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    free = sock.getsockname()[1]
    sock.close()
    out = loadgen.run_load(free, None, requests(1), 1, 30, 5, False)
    assert out["requests"][0]["status"] is None
    assert "ConnectionRefusedError" in out["requests"][0]["error"]


def test_the_key_never_appears_in_what_comes_back(server):
    script = Script(recorded(COMPLETION))
    script.mode = "401-echo"
    port = server(script)
    out = loadgen.run_load(port, KEY, requests(2), 1, 30, 10, True)
    assert script.auth == [f"Bearer {KEY}"] * 2
    error = out["requests"][0]["error"]
    assert error.startswith("HTTP 401") and "Bearer [REDACTED]" in error
    assert KEY not in json.dumps(out)
    with pytest.raises(ValueError) as err:
        loadgen.run_load(port, KEY + "\r\nX: y", requests(1), 1, 30, 10, False)
    assert KEY not in str(err.value)


# -- the limit -----------------------------------------------------------------------------------

def test_limit_abandons_what_is_in_flight_and_returns_at_once(server):
    script = Script(recorded(COMPLETION))
    script.mode = "stall"
    port = server(script)
    before = {t for t in threading.enumerate() if not t.daemon}
    started = time.monotonic()
    out = loadgen.run_load(port, KEY, requests(5), 2, limit_s=1.0, request_timeout_s=60,
                           keep_text=False)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.5
    assert out["hung"] is True
    records = out["requests"]
    assert [r["error"] for r in records] == [loadgen.NOT_FINISHED] * 5
    assert [r["start_s"] is None for r in records] == [False, False, True, True, True]
    assert out["result"]["completed"] == 0 and out["result"]["failed"] == 5
    assert 1.0 <= out["result"]["duration"] < 1.5
    assert {t for t in threading.enumerate() if not t.daemon} == before
    # the abandoned requests' sockets were shut: the server saw both clients go
    deadline = time.monotonic() + 2
    while script.closed_by_client < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert script.closed_by_client == 2


def test_a_hung_run_does_not_keep_the_process_alive(server):
    script = Script(recorded(COMPLETION))
    script.mode = "stall"
    port = server(script)
    code = textwrap.dedent(f"""
        import json, time
        from ascendctl_runtime import loadgen
        reqs = [loadgen.completion_request("m", prompt=[200, 201], max_tokens=4,
                                           ignore_eos=True, sampling={{}}) for _ in range(3)]
        started = time.monotonic()
        out = loadgen.run_load({port}, None, reqs, 3, 0.5, 60, False)
        print(json.dumps([out["hung"], round(time.monotonic() - started, 3)]))
    """)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'runtime'}"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    hung, seconds = json.loads(done.stdout)
    assert hung is True and seconds < 0.8
    assert time.monotonic() - started < 10       # the interpreter exited with threads out


def test_concurrency_bound_and_submission_order(server):
    script = Script(recorded(COMPLETION), ttft_s=0.03, gap_s=0.004)
    port = server(script)
    reqs = requests(10)
    out = loadgen.run_load(port, None, reqs, 3, 30, 10, False)
    assert script.max_in_flight == 3
    assert out["result"]["completed"] == 10 and out["result"]["max_concurrency"] == 3
    starts = [r["start_s"] for r in out["requests"]]
    assert starts == sorted(starts)
    script = Script(recorded(COMPLETION))
    port = server(script)
    loadgen.run_load(port, None, reqs, 1, 30, 10, False)
    assert [b["prompt"] for b in script.bodies] == [body["prompt"] for _, body in reqs]
    assert script.max_in_flight == 1


def test_run_for_keeps_the_load_for_its_duration_and_ticks(server):
    script = Script(recorded(COMPLETION), ttft_s=0.05, gap_s=0.005)
    port = server(script)
    made: list[int] = []
    ticks: list[float] = []

    def make(i: int) -> tuple[str, dict[str, Any]]:
        made.append(i)
        return loadgen.completion_request("tiny", prompt=[300 + i, 301], max_tokens=12,
                                          ignore_eos=True, sampling={})

    started = time.monotonic()
    out = loadgen.run_for(port, None, make, concurrency=2, duration_s=1.0,
                          request_timeout_s=5, keep_text=False,
                          on_tick=lambda: ticks.append(time.monotonic() - started),
                          tick_s=0.25)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.4 and out["hung"] is False
    n = len(out["requests"])
    assert 12 <= n <= 22            # ~0.1 s each, two at a time, for 1 s
    assert sorted(made) == list(range(n)) and script.max_in_flight == 2
    assert all(r["error"] is None for r in out["requests"])
    assert max(r["start_s"] for r in out["requests"]) < 1.0
    assert out["result"]["num_prompts"] == n == out["result"]["completed"]
    assert 3 <= len(ticks) <= 5 and ticks[0] >= 0.25


def test_the_module_ships_with_the_standard_library_alone(tmp_path):
    from ascendctl.nodecode import installed

    for module in installed().closure(["ascendctl_runtime.loadgen"]):
        target = tmp_path / module.relative_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(module.source())
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
            "import ascendctl_runtime.loadgen as m, ascendctl_runtime.npu, json\n"
            "print(json.dumps([m.__file__, sorted({n.split('.')[0] for n in sys.modules}"
            " - set(sys.stdlib_module_names) - {'__main__'})]))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path, foreign = json.loads(done.stdout)
    assert path.startswith(str(tmp_path)) and foreign == ["ascendctl", "ascendctl_runtime"]


# -- a soak's reading ----------------------------------------------------------------------------

class Metrics(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        text = (b'# TYPE vllm:num_requests_running gauge\n'
                b'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\n'
                b'vllm:num_requests_running{engine="1",model_name="tiny"} 2.0\n'
                b'vllm:generation_tokens_total{engine="0",model_name="tiny"} 1000.0\n'
                b'vllm:generation_tokens_total{engine="1",model_name="tiny"} 234.0\n')
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)


def test_sample_node_reads_every_piece(tmp_path, monkeypatch):
    from ascendctl.facts.npu_smi import parse_npu_smi_info
    from ascendctl_runtime import engine_state, npu

    health = tmp_path / "health"
    health.mkdir()
    (health / "agent.json").write_text(json.dumps(
        {"starts": {"ascendctl-engine.service": 2, "ascendctl-ray.service": 1,
                    "ascendctl-exporter.service": 5}}))
    (health / "supervisor.json").write_text(json.dumps({"recoveries_total": 3}))
    smi = (ROOT / "tests" / "fixtures" / "npu-smi_info_910B3_8npu_idle.txt").read_text()
    info = parse_npu_smi_info(smi)
    assert info.ok
    fullest = max((c for c in info.chips if c.hbm_total_mb),
                  key=lambda c: c.hbm_used_mb / c.hbm_total_mb)
    monkeypatch.setattr(npu, "read_npu_info", lambda: (info, ""))
    monkeypatch.setattr(engine_state, "read_units", lambda units: {
        u: engine_state.UnitShow(unit=u, cgroup="/system.slice/" + u) for u in units})
    monkeypatch.setattr(engine_state, "cgroup_pids",
                        lambda cgroup: {os.getpid()} if "engine" in cgroup else set())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        sample = loadgen.sample_node(str(tmp_path), ["ascendctl-ray.service",
                                                     "ascendctl-engine.service"],
                                     httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert sample["engine_restarts"] == 3 and sample["recoveries"] == 3
    assert sample["hbm_used_mib"] == float(fullest.hbm_used_mb)
    with open(f"/proc/{os.getpid()}/status") as handle:
        rss = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
    assert sample["rss_mib"] == pytest.approx(rss / 1024, rel=0.2)
    assert sample["requests_running"] == 5.0 and sample["generation_tokens_total"] == 1234.0
    assert abs(sample["t"] - time.time()) < 5


def test_sample_node_gives_none_for_what_is_missing(tmp_path, monkeypatch):
    from ascendctl_runtime import engine_state, npu

    def broken() -> Any:
        raise OSError("npu-smi: not found")

    monkeypatch.setattr(npu, "read_npu_info", broken)
    monkeypatch.setattr(engine_state, "read_units", lambda units: {
        u: engine_state.UnitShow(unit=u) for u in units})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    free = sock.getsockname()[1]
    sock.close()
    sample = loadgen.sample_node(str(tmp_path), ["ascendctl-engine.service"], free)
    assert set(sample) == {"t", "engine_restarts", "recoveries", "hbm_used_mib", "rss_mib",
                           "requests_running", "generation_tokens_total"}
    assert [k for k, v in sample.items() if v is not None] == ["t"]
    assert loadgen.sample_node(str(tmp_path), [], None)["requests_running"] is None
