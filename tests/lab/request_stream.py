"""A continuous stream of completions through the proxy, from the host, while something
(a rolling deploy) happens: alternately streamed (SSE) and plain, each on a new
connection, with the API key as Anthropic clients send it (`x-api-key`, mapped to Bearer by
the proxy). Counts every request and keeps every failure with its reason; a request
counts as answered only when its body is complete (a plain answer with a choice, or a
stream that ends with `data: [DONE]`)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class StreamResult:
    sent: int = 0
    ok: int = 0
    streamed_ok: int = 0
    plain_ok: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)


class RequestStream:
    def __init__(self, host: str, port: int, api_key: str, *, model: str = "tiny",
                 workers: int = 2, timeout: float = 120.0, max_tokens: int = 8,
                 pause_s: float = 0.0):
        # PAUSE_S between a worker's requests leaves the machine's cores to the engines
        # being switched
        self.host, self.port, self.api_key, self.model = host, port, api_key, model
        self.workers, self.timeout, self.max_tokens = workers, timeout, max_tokens
        self.pause_s = pause_s
        self.result = StreamResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = 0.0

    def __enter__(self) -> "RequestStream":
        self._started = time.monotonic()
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> StreamResult:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 10)
        self.result.seconds = time.monotonic() - self._started
        return self.result

    def wait_for(self, count: int, limit_s: float) -> None:
        """Until COUNT requests were sent (at most LIMIT_S seconds)."""
        deadline = time.monotonic() + limit_s
        while self.result.sent < count and time.monotonic() < deadline:
            time.sleep(0.2)

    def _work(self, index: int) -> None:
        number = index
        while not self._stop.is_set():
            stream = number % 2 == 0
            number += self.workers
            with self._lock:
                self.result.sent += 1
            error = self._one(stream, number)
            with self._lock:
                if error is None:
                    self.result.ok += 1
                    if stream:
                        self.result.streamed_ok += 1
                    else:
                        self.result.plain_ok += 1
                else:
                    self.result.failures.append(f"{'stream' if stream else 'plain'} #{number}"
                                                f" at {time.monotonic() - self._started:.1f}s: "
                                                f"{error}")
            self._stop.wait(self.pause_s)

    def _one(self, stream: bool, number: int) -> str | None:
        body = json.dumps({"model": self.model, "prompt": f"Request {number}: hello",
                           "max_tokens": self.max_tokens, "temperature": 0,
                           "stream": stream})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/v1/completions", body=body,
                         headers={"content-type": "application/json",
                                  "x-api-key": self.api_key, "connection": "close"})
            response = conn.getresponse()
            data = response.read().decode("utf-8", "replace")
            if response.status != 200:
                return f"HTTP {response.status}: {data[:200]}"
            if stream:
                events = [line[6:] for line in data.splitlines() if line.startswith("data: ")]
                if not events or events[-1] != "[DONE]":
                    return f"stream did not end with [DONE]: {data[-200:]!r}"
                chunks = [json.loads(e) for e in events[:-1]]
                if not any(c.get("choices") for c in chunks):
                    return "stream without choices"
                return None
            answer = json.loads(data)
            if not answer.get("choices"):
                return f"no choices: {data[:200]}"
            return None
        except (OSError, http.client.HTTPException, ValueError) as err:
            return f"{type(err).__name__}: {err}"
        finally:
            conn.close()
