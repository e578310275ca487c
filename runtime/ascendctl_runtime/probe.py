"""Ask the local engine whether it really serves, and read its metrics.

    python3 -m ascendctl_runtime.probe ready   --port 8000 --model NAME [--secrets FILE] [--stream]
    python3 -m ascendctl_runtime.probe metrics --port 8000
    python3 -m ascendctl_runtime.probe serving --port 8000 --model NAME [--secrets FILE]

Runs on the node next to the engine and prints one JSON object. `/health` only says the
process is up; readiness is `/v1/models` listing the model, then a real completion
(and a streamed one). The API key is read from the release's 0600 secrets file so it
never appears on a command line or in the controller's logs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from ascendctl_runtime import layout
from ascendctl_runtime.nodeutil import http_url, parse_env_file

# More than one token: vLLM 0.32's ExampleConnector (the lab's PD connector) computes
# align_to_block_size(len(prompt) - 1) = -block_size for a one-token prompt, and the decode
# engine dies on the negative computed-token count.
PROBE_PROMPT = "Hello, world"

METRICS_OF_INTEREST = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    # KV a PD decode engine took from its connector instead of computing it (tokens)
    "vllm:external_prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total",
)
# a PD unit's router (vllm-router's Prometheus endpoint)
ROUTER_METRICS = (
    "vllm_router_pd_requests_total",
    "vllm_router_pd_prefill_requests_total",
    "vllm_router_pd_decode_requests_total",
    "vllm_router_pd_errors_total",
    "vllm_router_pd_prefill_errors_total",
    "vllm_router_pd_decode_errors_total",
)


def read_api_key(secrets_file: Optional[str]) -> Optional[str]:
    """The API key in the release's secrets.env, read as systemd reads it."""
    if not secrets_file:
        return None
    try:
        with open(secrets_file, encoding="utf-8") as handle:
            return parse_env_file(handle.read()).get(layout.API_KEY_VAR) or None
    except FileNotFoundError:
        return None


class Engine:
    def __init__(self, host: str, port: int, api_key: Optional[str], timeout: float):
        self.base = http_url(host, port)
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None,
                stream: bool = False) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                if stream:
                    return response.status, _read_sse(response)
                raw = response.read()
                return response.status, _decode(raw, response.headers.get_content_type())
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read(), err.headers.get_content_type())


def _decode(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", "replace")
    if content_type == "application/json":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _read_sse(response) -> dict[str, Any]:
    chunks, text, done = 0, [], False
    for raw_line in response:
        line = raw_line.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        chunks += 1
        try:
            event = json.loads(payload)
            text.append(event["choices"][0].get("text") or "")
        except (ValueError, KeyError, IndexError):
            pass
    return {"chunks": chunks, "done": done, "text": "".join(text)}


def check_ready(engine: Engine, model: str, stream: bool, max_tokens: int) -> dict[str, Any]:
    result: dict[str, Any] = {"ready": False, "step": "models"}
    started = time.monotonic()
    try:
        status, body = engine.request("GET", "/v1/models")
    except (OSError, urllib.error.URLError) as err:
        result["error"] = f"/v1/models: {getattr(err, 'reason', err)}"
        return result
    if status != 200:
        result["error"] = f"/v1/models answered {status}"
        return result
    served = [entry.get("id") for entry in body.get("data", [])] if isinstance(body, dict) else []
    result["models"] = served
    if model not in served:
        result["error"] = f"/v1/models does not list {model!r} (it lists {served})"
        return result
    result["step"] = "completion"
    prompt = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": max_tokens, "temperature": 0}
    try:
        status, body = engine.request("POST", "/v1/completions", prompt)
    except (OSError, urllib.error.URLError) as err:
        result["error"] = f"completion: {getattr(err, 'reason', err)}"
        return result
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        result["error"] = f"completion answered {status}: {str(body)[:300]}"
        return result
    result["completion"] = body["choices"][0].get("text", "")
    result["usage"] = body.get("usage")
    if stream:
        result["step"] = "stream"
        try:
            status, events = engine.request("POST", "/v1/completions",
                                            {**prompt, "stream": True}, stream=True)
        except (OSError, urllib.error.URLError) as err:
            result["error"] = f"streamed completion: {getattr(err, 'reason', err)}"
            return result
        if status != 200 or not isinstance(events, dict) or not events["done"] \
                or events["chunks"] < 1:
            result["error"] = f"streamed completion answered {status}: {str(events)[:300]}"
            return result
        result["stream"] = events
    result.update(ready=True, step="done", seconds=round(time.monotonic() - started, 3))
    return result


def serving_probe(engine: Engine, model: str) -> dict[str, Any]:
    """Prove serving: one real 1-token completion through the API key (never /health).
    {"ok", "seconds", "error", "status"}; the engine's timeout bounds it."""
    started = time.monotonic()
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
    try:
        status, answer = engine.request("POST", "/v1/completions", body)
    except (OSError, urllib.error.URLError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            reason = f"no answer within {engine.timeout:g} s"
        return {"ok": False, "seconds": round(time.monotonic() - started, 3),
                "error": f"completion: {reason}", "status": None}
    seconds = round(time.monotonic() - started, 3)
    if status != 200 or not isinstance(answer, dict) or not answer.get("choices"):
        return {"ok": False, "seconds": seconds, "status": status,
                "error": f"completion answered {status}: {str(answer)[:200]}"}
    return {"ok": True, "seconds": seconds, "status": status, "error": None}


IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def _metrics(engine: Engine, names: tuple[str, ...]) -> Optional[dict[str, float]]:
    """NAMES summed over their label sets, from /metrics (None if it does not answer)."""
    try:
        status, body = engine.request("GET", "/metrics")
    except (OSError, urllib.error.URLError):
        return None
    if status != 200 or not isinstance(body, str):
        return None
    return parse_metrics(body, names)


def generation_tokens(engine: Engine) -> Optional[float]:
    """vllm:generation_tokens_total now (None if /metrics does not answer): a counter that
    advances means the engine works, even when a probe waited too long behind a queue."""
    found = _metrics(engine, ("vllm:generation_tokens_total",))
    return None if found is None else found.get("vllm:generation_tokens_total")


def in_flight(engine: Engine) -> Optional[float]:
    """Requests running plus waiting now (None if /metrics does not answer)."""
    found = _metrics(engine, IN_FLIGHT)
    return None if found is None else sum(found.get(name, 0.0) for name in IN_FLIGHT)


def parse_metrics(text: str, wanted: tuple[str, ...] = METRICS_OF_INTEREST) -> dict[str, float]:
    """Sum each wanted metric over its label sets (Prometheus text format)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_end = len(line)
        for sep in ("{", " "):
            index = line.find(sep)
            if index != -1:
                name_end = min(name_end, index)
        name = line[:name_end]
        if name not in wanted:
            continue
        value_part = line.rsplit("}", 1)[-1] if "{" in line else line[name_end:]
        fields = value_part.split()
        if not fields:
            continue
        try:
            totals[name] = totals.get(name, 0.0) + float(fields[0])
        except ValueError:
            continue
    return totals


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ascendctl_runtime.probe")
    parser.add_argument("what", choices=["ready", "metrics", "serving"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="")
    parser.add_argument("--secrets", default=None, help="the release's secrets.env")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    engine = Engine(args.host, args.port, read_api_key(args.secrets), args.timeout)
    if args.what == "ready":
        result = check_ready(engine, args.model, args.stream, args.max_tokens)
        print(json.dumps(result))
        return 0 if result["ready"] else 1
    if args.what == "serving":
        result = serving_probe(engine, args.model)
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    try:
        status, body = engine.request("GET", "/metrics")
    except (OSError, urllib.error.URLError) as err:
        print(json.dumps({"ok": False, "error": str(getattr(err, "reason", err))}))
        return 1
    if status != 200:
        print(json.dumps({"ok": False, "error": f"/metrics answered {status}"}))
        return 1
    print(json.dumps({"ok": True, "metrics": parse_metrics(body if isinstance(body, str)
                                                           else json.dumps(body))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
