"""A load generator that runs on a serving node, next to the engine (standard library only).

The release-promotion gates drive the engine's OpenAI API with it: regression rounds, a long
tail of many requests, a soak, a concurrency sweep. Threads and http.client, one
connection per request, every request streamed (SSE) so the time of each token is seen.

    random_prompts    deterministic token-id prompts (like `vllm bench serve --dataset-name
                      random`, without a tokenizer: the ids go to the API as they are)
    completion_request  the path and body of one streamed request
    run_load          a list of requests, in order, at most `concurrency` in flight, within a
                      time limit; per-request records and a summary in the key format of
                      vLLM's `vllm bench serve --save-result` (ascendctl.benchmark.figures
                      reads it unchanged)
    run_for           the same with a request factory, kept at `concurrency` in flight for a
                      duration, calling back every tick (a soak)
    sample_node       one reading of the node for a soak: engine restarts, recoveries, HBM,
                      the engine's resident memory, two engine counters

The figures follow vLLM's own benchmark (vllm-project/vllm, v0.32.0, the version the lab
serves): `vllm/benchmarks/lib/endpoint_request_func.py` (async_request_openai_completions
and ..._chat_completions: what a token chunk is, TTFT, ITL, the request's latency) and
`vllm/benchmarks/serve.py` (calculate_metrics: TPOT, which requests count, numpy's mean,
median, std and linear percentiles; benchmark(): the result's keys). Where this module is
stricter, it says so below.

The API key goes in `Authorization: Bearer` and nowhere else: every string this module
returns has it replaced by [REDACTED].
"""

from __future__ import annotations

import http.client
import json
import math
import random
import socket
import threading
import time
import urllib.request
from typing import Any, Callable, Optional, Union

from ascendctl_runtime import engine_state as es
from ascendctl_runtime import healthstore, layout, probe

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
# Token ids below this are left out of random prompts: many vocabularies put their special
# tokens (pad, bos, eos, unk, ...) first (Llama's <unk>/<s>/</s> are 0-2, GPT-2 and
# Qwen keep them at the end, T5 0-2, BERT-style ones up to ~100 [unused]). vLLM's random
# dataset drops the tokenizer's all_special_ids; without a tokenizer on the node the lowest
# ids are the ones to avoid. VOCAB_SIZE should be the tokenizer's base vocabulary
# (tokenizer.vocab_size: Qwen's added special tokens sit above it, config.json's vocab_size
# counts them and padding too).
FIRST_TOKEN_ID = 128
NOT_FINISHED = "not finished within the run's limit"
REDACTED = "[REDACTED]"
ERROR_BODY = 300
PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
# the request body's keys completion_request sets itself; `sampling` may not replace them
RESERVED = ("model", "prompt", "messages", "stream", "stream_options", "max_tokens",
            "max_completion_tokens")
USER_AGENT = "ascendctl-loadgen"

Request = tuple[str, dict[str, Any]]


# -- requests ---------------------------------------------------------------------------------

def random_prompts(vocab_size: int, num: int, input_len: int, seed: int) -> list[list[int]]:
    """NUM prompts of INPUT_LEN token ids each, the same for the same arguments.

    As vLLM's random dataset: each prompt starts at a random offset and walks the allowed ids
    in order, (offset + index + j) mod the allowed range, so prompts share no prefix (no
    prefix-cache hit between them). The allowed ids are FIRST_TOKEN_ID .. VOCAB_SIZE-1. Sent
    as ids, a prompt is exactly INPUT_LEN tokens (vLLM decodes and re-encodes its text)."""
    if num < 0 or input_len < 0:
        raise ValueError("num and input_len must not be negative")
    allowed = vocab_size - FIRST_TOKEN_ID
    if allowed < 1:
        raise ValueError(f"vocab_size {vocab_size} leaves no token id at or above "
                         f"{FIRST_TOKEN_ID}")
    rng = random.Random(seed)
    offsets = [rng.randrange(allowed) for _ in range(num)]
    return [[FIRST_TOKEN_ID + (offset + index + j) % allowed for j in range(input_len)]
            for index, offset in enumerate(offsets)]


def completion_request(model: str, *, prompt: Union[str, list[int], None] = None,
                       messages: Optional[list[Any]] = None, max_tokens: int,
                       ignore_eos: bool, sampling: dict[str, Any]) -> Request:
    """The path and body of one streamed request: /v1/completions for PROMPT (text or token
    ids), /v1/chat/completions for MESSAGES. SAMPLING's keys (temperature, top_p, top_k,
    seed, ...) go in as given; an empty dict leaves the server's defaults (the model's
    generation config: "production sampling"). IGNORE_EOS is vLLM's own parameter: the
    request then generates exactly MAX_TOKENS."""
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt and messages")
    clash = sorted(set(sampling) & set(RESERVED))
    if clash:
        raise ValueError(f"sampling may not set {', '.join(clash)}")
    body: dict[str, Any] = {"model": model, "stream": True,
                            "stream_options": {"include_usage": True}}
    if messages is not None:
        # vLLM's benchmark names the limit max_completion_tokens on the chat API
        path = CHAT
        body.update(messages=messages, max_completion_tokens=int(max_tokens))
    else:
        path = COMPLETIONS
        body.update(prompt=prompt, max_tokens=int(max_tokens))
    if ignore_eos:
        body["ignore_eos"] = True
    body.update(sampling)
    return path, body


# -- one request --------------------------------------------------------------------------------

class _Cancelled(Exception):
    pass


class _Slot:
    """One request in flight: the monitor may cancel it (its socket shut down)."""

    def __init__(self, i: int, started: float, deadline: float):
        self.i = i
        self.started = started
        self.deadline = deadline
        self.lock = threading.Lock()
        self.sock: Optional[socket.socket] = None
        self.reason: Optional[str] = None

    def cancel(self, reason: str) -> None:
        with self.lock:
            if self.reason is None:
                self.reason = reason
            sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)      # wakes a blocked recv with EOF
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def attach(self, sock: Optional[socket.socket]) -> None:
        with self.lock:
            if self.reason is not None:
                raise _Cancelled(self.reason)
            self.sock = sock


class _Stream:
    """What one streamed answer said (vLLM's benchmark's reading of it)."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.first: Optional[float] = None       # the first token chunk's arrival
        self.last: Optional[float] = None        # the last token chunk's arrival
        self.gaps: list[float] = []              # between token chunks (ITL), seconds
        self.text: list[str] = []
        self.text_chunks = 0
        self.usage_completion: Optional[int] = None
        self.usage_prompt: Optional[int] = None
        self.done = False
        self.error: Optional[str] = None

    def event(self, data: str, now: float) -> None:
        if data == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            self.error = self.error or f"not JSON in the stream: {data[:ERROR_BODY]}"
            return
        if not isinstance(event, dict):
            self.error = self.error or f"not an object in the stream: {data[:ERROR_BODY]}"
            return
        if event.get("error"):
            detail = event["error"]
            if isinstance(detail, dict):
                detail = detail.get("message") or detail
            self.error = self.error or f"error in the stream: {str(detail)[:ERROR_BODY]}"
            return
        choices = event.get("choices")
        if choices:
            # a chunk with a choice is a token chunk, even with empty text (vLLM's rule)
            if self.first is None:
                self.first = now
            else:
                self.gaps.append(now - (self.last or now))
            self.last = now
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str) and text:
                self.text.append(text)
                self.text_chunks += 1
            elif isinstance(delta, dict) and (delta.get("reasoning_content")
                                              or delta.get("reasoning")):
                self.text_chunks += 1
        usage = event.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.usage_completion = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.usage_prompt = usage["prompt_tokens"]


def _read_sse(response: http.client.HTTPResponse, stream: _Stream) -> None:
    """Feed the SSE events of RESPONSE to STREAM until [DONE] or the end of the body."""
    data: list[str] = []
    while True:
        raw = response.readline()
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                stream.event("\n".join(data), time.perf_counter())
                data = []
                if stream.done:
                    return
            continue
        if line.startswith(":"):
            continue                              # an SSE comment (a ping)
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        stream.event("\n".join(data), time.perf_counter())


class _Client:
    def __init__(self, host: str, port: int, api_key: Optional[str], timeout_s: float,
                 keep_text: bool):
        if api_key is not None and any(c in api_key for c in "\r\n\0"):
            raise ValueError("the API key contains a line break or NUL")
        self.host, self.port = host, int(port)
        self.api_key = api_key or None
        self.timeout_s = float(timeout_s)
        self.keep_text = keep_text
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                        "User-Agent": USER_AGENT}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"

    def redact(self, text: str) -> str:
        return text.replace(self.api_key, REDACTED) if self.api_key else text

    def run(self, slot: _Slot, run_t0: float, path: str, body: dict[str, Any]
            ) -> tuple[dict[str, Any], list[float]]:
        """One request: its record and, when it succeeded, its ITL gaps."""
        t0 = slot.started
        stream = _Stream(t0)
        status: Optional[int] = None
        error: Optional[str] = None
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.connect()
            slot.attach(conn.sock)
            conn.request("POST", path, body=json.dumps(body).encode(), headers=self.headers)
            response = conn.getresponse()
            status = response.status
            if status != 200:
                answer = response.read(4 * ERROR_BODY).decode("utf-8", "replace")
                error = f"HTTP {status}: {' '.join(answer.split())[:ERROR_BODY]}"
            else:
                _read_sse(response, stream)
        except _Cancelled:
            pass
        except TimeoutError:
            error = f"timed out after {self.timeout_s:g} s"
        except (OSError, http.client.HTTPException, ValueError, TypeError) as err:
            error = f"{type(err).__name__}: {err}"
        finally:
            conn.close()
        end = time.perf_counter()
        if slot.reason is not None:
            error = slot.reason                  # cancelled: its reason, not the EOF it caused
        if error is None:
            if stream.error:
                error = stream.error
            elif stream.first is None:
                error = "the stream carried no token"
            elif not stream.done:
                # vLLM's benchmark counts a stream cut short as a success; a gate must not
                error = "the stream ended without [DONE]"
        tokens = stream.usage_completion if stream.usage_completion is not None \
            else stream.text_chunks
        prompt_tokens = stream.usage_prompt
        if prompt_tokens is None and isinstance(body.get("prompt"), list):
            prompt_tokens = len(body["prompt"])
        ttft = None if stream.first is None else (stream.first - t0) * 1000
        # vLLM's latency: to the last token chunk (the usage chunk and [DONE] carry none);
        # a failed request's e2e_ms is the time until it failed
        last = stream.last if error is None and stream.last is not None else end
        e2e = (last - t0) * 1000
        tpot = (e2e - ttft) / (tokens - 1) if error is None and ttft is not None \
            and tokens > 1 else None
        record: dict[str, Any] = {
            "i": slot.i, "start_s": round(t0 - run_t0, 6),
            "ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot,
            "output_tokens": tokens, "prompt_tokens": prompt_tokens,
            "status": status, "error": None if error is None else self.redact(error)}
        if self.keep_text:
            record["text"] = self.redact("".join(stream.text))
        return record, (stream.gaps if error is None else [])


# -- a run ----------------------------------------------------------------------------------

class _Run:
    """Worker threads (daemons) take request indices in order; the caller's thread watches
    the deadlines: each request's timeout, the run's limit."""

    def __init__(self, client: _Client, concurrency: int,
                 take: Callable[[int], Optional[Request]], total: Optional[int],
                 issue_for_s: Optional[float] = None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.take = take
        self.total = total                        # None: until told to stop issuing
        self.cond = threading.Condition()
        self.records: dict[int, dict[str, Any]] = {}
        self.gaps: dict[int, list[float]] = {}
        self.inflight: dict[int, _Slot] = {}
        self.next_i = 0
        self.issuing = True
        self.closed = False
        self.hung = False
        self.t0 = time.perf_counter()
        # run_for: nothing new starts after this
        self.issue_until = math.inf if issue_for_s is None else self.t0 + issue_for_s
        self.last_end = self.t0
        self.ended: Optional[float] = None
        workers = concurrency if total is None else min(concurrency, max(total, 1))
        self.concurrency = concurrency
        self.alive = workers
        self.threads = [threading.Thread(target=self._worker, name=f"loadgen-{n}", daemon=True)
                        for n in range(workers)]
        for thread in self.threads:
            thread.start()

    def _more(self) -> bool:
        if time.perf_counter() >= self.issue_until:
            self.issuing = False
        return self.issuing and (self.total is None or self.next_i < self.total)

    def _worker(self) -> None:
        try:
            while True:
                with self.cond:
                    if self.closed or not self._more():
                        return
                    i = self.next_i
                    self.next_i += 1
                    now = time.perf_counter()
                    slot = _Slot(i, now, now + self.client.timeout_s)
                    self.inflight[i] = slot
                try:
                    request = self.take(i)
                    if request is None:
                        raise ValueError("no request")
                    path, body = request
                except Exception as err:  # the caller's factory: its failure is one record
                    record: dict[str, Any] = {
                        "i": i, "start_s": round(slot.started - self.t0, 6), "ttft_ms": None,
                        "e2e_ms": None, "tpot_ms": None, "output_tokens": 0,
                        "prompt_tokens": None, "status": None,
                        "error": self.client.redact(f"the request could not be made: "
                                                    f"{type(err).__name__}: {err}")}
                    if self.client.keep_text:
                        record["text"] = ""
                    gaps: list[float] = []
                else:
                    record, gaps = self.client.run(slot, self.t0, path, body)
                with self.cond:
                    if self.closed:
                        return
                    self.inflight.pop(i, None)
                    self.records[i] = record
                    if gaps:
                        self.gaps[i] = gaps
                    self.last_end = max(self.last_end, time.perf_counter())
                    self.cond.notify_all()
        finally:
            with self.cond:
                self.alive -= 1
                self.cond.notify_all()

    def watch(self, limit_at: float, on_tick: Optional[Callable[[], Any]] = None,
              tick_s: float = 0.0) -> None:
        next_tick = self.t0 + tick_s if on_tick is not None and tick_s > 0 else math.inf
        try:
            while True:
                with self.cond:
                    now = time.perf_counter()
                    if self.alive == 0 or (not self.inflight and not self._more()):
                        self.ended = self.last_end
                        return
                    if now >= limit_at:
                        self._abandon(now)
                        return
                    for slot in list(self.inflight.values()):
                        if now >= slot.deadline:
                            slot.cancel(f"timed out after {self.client.timeout_s:g} s")
                    wake = min([limit_at, next_tick] +
                               [s.deadline for s in self.inflight.values()
                                if s.reason is None] +
                               ([self.issue_until] if self.issuing else []))
                    self.cond.wait(max(0.0, min(wake - now, 1.0)) + 0.001)
                if time.perf_counter() >= next_tick and on_tick is not None:
                    on_tick()
                    now = time.perf_counter()
                    while next_tick <= now:
                        next_tick += tick_s
        except BaseException:
            with self.cond:
                if not self.closed:
                    self._abandon(time.perf_counter())
            raise

    def _abandon(self, now: float) -> None:
        """The limit: what is in flight is cut off (sockets shut), nothing new starts. The
        workers are daemons; they see `closed` and stop."""
        self.hung = bool(self.inflight) or self._more()
        self.closed = True
        self.issuing = False
        self.ended = now
        for slot in self.inflight.values():
            slot.cancel(NOT_FINISHED)

    def outcome(self, num_prompts: Optional[int]) -> dict[str, Any]:
        with self.cond:
            count = self.next_i if num_prompts is None else num_prompts
            records = []
            for i in range(count):
                record = self.records.get(i)
                if record is None:
                    slot = self.inflight.get(i)
                    record = {"i": i,
                              "start_s": None if slot is None
                              else round(slot.started - self.t0, 6),
                              "ttft_ms": None, "e2e_ms": None, "tpot_ms": None,
                              "output_tokens": 0, "prompt_tokens": None, "status": None,
                              "error": NOT_FINISHED}
                    if self.client.keep_text:
                        record["text"] = ""
                records.append(record)
            ended = self.ended if self.ended is not None else time.perf_counter()
            duration = max(ended - self.t0, 1e-9)
            gaps = [g for i in sorted(self.gaps) for g in self.gaps[i]]
        return {"requests": records, "hung": self.hung,
                "result": bench_result(records, gaps, duration, self.concurrency)}


def run_load(port: int, api_key: Optional[str], requests: list[Request], concurrency: int,
             limit_s: float, request_timeout_s: float, keep_text: bool,
             host: str = "127.0.0.1") -> dict[str, Any]:
    """Send REQUESTS ((path, body) pairs, e.g. from completion_request) in order, at most
    CONCURRENCY in flight, each within REQUEST_TIMEOUT_S, the whole run within LIMIT_S.

    Returns {"requests": [record per request, in order], "hung": bool, "result": vLLM's
    `bench serve` result keys}. A record: i, start_s (since the run began; None if never
    sent), ttft_ms, e2e_ms, tpot_ms, output_tokens, prompt_tokens, status (HTTP, None
    without an answer), error (None on success), text (with KEEP_TEXT). At LIMIT_S the
    requests still out are abandoned ("hung"): their sockets are shut, the call returns at
    once, and the worker threads are daemons that end on their own."""
    client = _Client(host, port, api_key, request_timeout_s, keep_text)
    requests = list(requests)
    run = _Run(client, concurrency, lambda i: requests[i], len(requests))
    run.watch(run.t0 + float(limit_s))
    return run.outcome(len(requests))


def run_for(port: int, api_key: Optional[str], make_request: Callable[[int], Request],
            concurrency: int, duration_s: float, request_timeout_s: float, keep_text: bool,
            on_tick: Optional[Callable[[], Any]] = None, tick_s: float = 60.0,
            host: str = "127.0.0.1", limit_s: Optional[float] = None) -> dict[str, Any]:
    """Keep CONCURRENCY requests in flight for DURATION_S: request i is MAKE_REQUEST(i)
    (made in a worker thread; one that raises is a failed record). Nothing new starts after
    DURATION_S; what is in flight then may finish until LIMIT_S (default DURATION_S +
    REQUEST_TIMEOUT_S + 5 s) and is abandoned after it. ON_TICK() runs every TICK_S in the
    caller's thread (an exception from it stops the run and propagates). The same shape as
    run_load; num_prompts is the number of requests sent."""
    client = _Client(host, port, api_key, request_timeout_s, keep_text)
    limit = float(limit_s) if limit_s is not None else \
        float(duration_s) + float(request_timeout_s) + 5.0
    run = _Run(client, concurrency, make_request, None, issue_for_s=float(duration_s))
    run.watch(run.t0 + limit, on_tick=on_tick, tick_s=float(tick_s))
    return run.outcome(None)


# -- the summary, as vLLM's benchmark writes it ----------------------------------------------

def percentile(values: list[float], p: float) -> float:
    """numpy.percentile(values, p) with its default (linear) method; 0.0 for no values, as
    vLLM's `np.percentile(x or 0, p)`."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stats(values: list[float]) -> dict[str, float]:
    """mean, median, std (population, numpy's default) and the percentiles; 0.0 each for no
    values (vLLM: np.mean(x or 0))."""
    if not values:
        return {"mean": 0.0, "median": 0.0, "std": 0.0, **{f"p{p}": 0.0 for p in PERCENTILES}}
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "median": percentile(values, 50), "std": std,
            **{f"p{p}": percentile(values, p) for p in PERCENTILES}}


def bench_result(records: list[dict[str, Any]], itl_s: list[float], duration_s: float,
                 concurrency: int) -> dict[str, Any]:
    """The summary of RECORDS in the keys `vllm bench serve --save-result` writes
    (vllm/benchmarks/serve.py, calculate_metrics and benchmark): only successful requests
    count; TPOT is per request (e2el - ttft) / (output tokens - 1), over the requests with
    more than one output token; ITL is every gap between token chunks (ITL_S, seconds) of
    the successful requests; throughputs are per second of DURATION_S."""
    done = [r for r in records if r.get("error") is None]
    output = sum(int(r.get("output_tokens") or 0) for r in done)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in done)
    series = {
        "ttft": [float(r["ttft_ms"]) for r in done if r.get("ttft_ms") is not None],
        "tpot": [float(r["tpot_ms"]) for r in done if r.get("tpot_ms") is not None],
        "itl": [g * 1000 for g in itl_s],
        "e2el": [float(r["e2e_ms"]) for r in done if r.get("e2e_ms") is not None],
    }
    result: dict[str, Any] = {
        "num_prompts": len(records),
        "max_concurrency": int(concurrency),
        "request_rate": "inf",
        "duration": duration_s,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": len(done) / duration_s,
        "output_throughput": output / duration_s,
        "total_token_throughput": (prompt + output) / duration_s,
    }
    for metric in METRICS:
        for stat, value in _stats(series[metric]).items():
            result[f"{stat}_{metric}_ms"] = value
    return result


# -- a soak's reading of the node --------------------------------------------------------------

def _guard(read: Callable[[], Any]) -> Any:
    """READ(), or None when the piece it reads is missing or unreadable."""
    try:
        return read()
    except Exception:  # a sample reports what it can read, never fails
        return None


def _engine_restarts(root: str, engine_units: list[str]) -> Optional[int]:
    """Engine unit starts counted by the node agent (health/agent.json `starts`, per unit,
    for the serving release: what `ascendctl status` shows as restarts), summed."""
    state = healthstore.read_json(healthstore.health_path(root, layout.AGENT_STATE))
    if state is None or not isinstance(state.get("starts"), dict):
        return None
    return sum(int(state["starts"].get(unit) or 0) for unit in engine_units)


def _recoveries(root: str) -> Optional[int]:
    """The supervisor's completed gang recoveries (head only: health/supervisor.json)."""
    state = healthstore.read_json(healthstore.health_path(root, layout.SUPERVISOR_STATE))
    if state is None or not isinstance(state.get("recoveries_total"), int):
        return None
    return int(state["recoveries_total"])


def _hbm_used_mib() -> Optional[float]:
    """HBM in use on the fullest NPU (by fraction, as the HBM watchdog), from npu-smi."""
    from ascendctl_runtime import npu

    info, _error = npu.read_npu_info()
    if info is None:
        return None
    best: Optional[tuple[float, float]] = None
    for chip in info.chips:
        if chip.hbm_used_mb is None or not chip.hbm_total_mb:
            continue
        fraction = chip.hbm_used_mb / chip.hbm_total_mb
        if best is None or fraction > best[0]:
            best = (fraction, float(chip.hbm_used_mb))
    return None if best is None else best[1]


def rss_mib(pids: set[int]) -> Optional[float]:
    """VmRSS summed over PIDS (MiB); None when none of them could be read."""
    total_kib, seen = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total_kib += int(line.split()[1])
                        seen = True
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total_kib / 1024.0 if seen else None


def _engine_rss_mib(engine_units: list[str]) -> Optional[float]:
    shows = es.read_units(list(engine_units))
    pids: set[int] = set()
    for show in shows.values():
        pids |= es.cgroup_pids(show.cgroup)
        if show.main_pid:
            pids.add(show.main_pid)
    return rss_mib(pids) if pids else None


METRIC_RUNNING = "vllm:num_requests_running"
METRIC_GENERATED = "vllm:generation_tokens_total"


def _engine_metrics(port: int, host: str, timeout_s: float) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{host}:{int(port)}/metrics",
                                timeout=timeout_s) as response:
        text = response.read(16_000_000).decode("utf-8", "replace")
    return probe.parse_metrics(text, (METRIC_RUNNING, METRIC_GENERATED))


def sample_node(root: str, engine_units: list[str], metrics_port: Optional[int],
                host: str = "127.0.0.1", timeout_s: float = 5.0) -> dict[str, Any]:
    """One reading for a soak; a piece that cannot be read is None, never an exception.

    engine_restarts  starts of ENGINE_UNITS by the node agent (agent.json)
    recoveries       the supervisor's recoveries_total (the head's supervisor.json)
    hbm_used_mib     HBM in use on the fullest NPU (npu-smi info)
    rss_mib          VmRSS summed over every process in the engine units' cgroups
    requests_running / generation_tokens_total   the engine's /metrics on METRICS_PORT,
                     summed over label sets"""
    metrics = _guard(lambda: _engine_metrics(metrics_port, host, timeout_s)) \
        if metrics_port else None
    return {
        "t": time.time(),
        "engine_restarts": _guard(lambda: _engine_restarts(root, engine_units)),
        "recoveries": _guard(lambda: _recoveries(root)),
        "hbm_used_mib": _guard(_hbm_used_mib),
        "rss_mib": _guard(lambda: _engine_rss_mib(engine_units)),
        "requests_running": None if metrics is None else metrics.get(METRIC_RUNNING),
        "generation_tokens_total": None if metrics is None else metrics.get(METRIC_GENERATED),
    }


__all__ = ["random_prompts", "completion_request", "run_load", "run_for", "bench_result",
           "percentile", "sample_node", "rss_mib", "NOT_FINISHED", "FIRST_TOKEN_ID"]

