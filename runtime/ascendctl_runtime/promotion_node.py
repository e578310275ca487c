"""A serving group head's half of the promotion gates (standard library only; sent over
SSH). The load runs ON the head against its own API on 127.0.0.1, with the API key read
here from the release's 0600 secrets.env: the key never travels, never appears in an
answer (loadgen redacts it from errors).

Operations (each one JSON call, one JSON answer; shipped by ascendctl/transport/nodecall.py):

    locate    the serving release, its model directory and vocabulary size, whether it
              has an API key
    load      one bench round of the profile: random token prompts, EOS ignored, greedy;
              per-request latencies and vLLM-bench-format figures
    tail      the long tail: prompts cycled to N requests with the production sampling
              (slo.promotion.sampling; nothing set: the server's defaults), the answers'
              texts kept
    soak      traffic for a duration at the profile's concurrency, with one node sample
              (engine starts, recoveries, HBM, RSS, vLLM counters) every SAMPLE_S
    sample    one node sample (a follower's, during the head's soak)
    store, record
              a gate's evidence beside the release, and a release's newest record of a
              gate (promotion_store.py, whose own entry lists records and envelopes)
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from ascendctl_runtime import layout, loadgen, probe, promotion_store
from ascendctl_runtime.quality_node import _history, previous_release
from ascendctl_runtime.nodeutil import answer_call

ID_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_REQUESTS = 100_000


def _release_dir(root: str, release: str) -> str:
    if not release or not set(release) <= ID_CHARS or release[0] in "._-" or len(release) > 128:
        raise ValueError(f"bad release id {release!r}")
    return os.path.join(root, layout.RELEASES_DIR, release)


def _api_key(root: str, release: str) -> Optional[str]:
    return probe.read_api_key(os.path.join(_release_dir(root, release), layout.SECRETS_ENV))


def _json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def vocab_size(model_dir: str) -> Optional[int]:
    """The token ids a random prompt may use: the tokenizer's base vocabulary
    (tokenizer.json), bounded by config.json's vocab_size (or its text_config's). The
    model's embedding is often padded past the tokenizer: ids there are not tokens."""
    sizes = []
    config = _json(os.path.join(model_dir, "config.json"))
    if isinstance(config, dict):
        for section in (config, config.get("text_config") or {}):
            value = section.get("vocab_size") if isinstance(section, dict) else None
            if isinstance(value, int) and value > 0:
                sizes.append(value)
                break
    tokenizer = _json(os.path.join(model_dir, "tokenizer.json"))
    vocab = (tokenizer.get("model") or {}).get("vocab") if isinstance(tokenizer, dict) else None
    if isinstance(vocab, (dict, list)) and vocab:
        sizes.append(len(vocab))
    return min(sizes) if sizes else None


def op_locate(root: str, release: Optional[str] = None) -> dict[str, Any]:
    current = layout.current_release(root)
    release = release or current
    if release is None:
        return {"current": None, "release": None}
    directory = _release_dir(root, release)
    model = os.path.join(directory, "model")
    return {"current": current, "release": release, "release_dir": directory,
            "release_exists": os.path.isdir(directory), "model_dir": model,
            "vocab_size": vocab_size(model),
            "api_key": _api_key(root, release) is not None,
            "previous": previous_release(_history(root), release)}


def _count(value: Any, what: str, high: int = MAX_REQUESTS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
        raise ValueError(f"{what} must be an integer from 1 to {high}, got {value!r}")
    return value


def _profile_requests(profile: dict[str, Any], model: str, vocab: int,
                      count: Optional[int] = None) -> list[tuple[str, dict[str, Any]]]:
    prompts = loadgen.random_prompts(vocab, _count(count or profile["num_prompts"], "requests"),
                                     _count(profile["input_len"], "input_len", 1 << 20),
                                     int(profile.get("seed") or 0))
    return [loadgen.completion_request(model, prompt=prompt,
                                       max_tokens=_count(profile["output_len"], "output_len",
                                                         1 << 20),
                                       ignore_eos=True, sampling={"temperature": 0})
            for prompt in prompts]


def op_load(root: str, release: str, port: int, model: str, profile: dict[str, Any],
            vocab: int, limit_s: float, request_timeout_s: float) -> dict[str, Any]:
    requests = _profile_requests(profile, model, _count(vocab, "vocab", 1 << 24))
    return loadgen.run_load(int(port), _api_key(root, release), requests,
                            _count(profile["concurrency"], "concurrency", 4096),
                            float(limit_s), float(request_timeout_s), keep_text=False)


def op_tail(root: str, release: str, port: int, model: str, prompts: list[dict[str, Any]],
            requests: int, concurrency: int, limit_s: float,
            request_timeout_s: float, sampling: Optional[dict[str, Any]] = None
            ) -> dict[str, Any]:
    if not prompts:
        raise ValueError("the long tail needs at least one prompt")
    bodies = []
    for i in range(_count(requests, "requests")):
        prompt = prompts[i % len(prompts)]
        bodies.append(loadgen.completion_request(
            model, prompt=prompt.get("prompt"), messages=prompt.get("messages"),
            max_tokens=_count(prompt.get("max_tokens"), "max_tokens", 1 << 20),
            ignore_eos=False, sampling=dict(sampling or {})))
    return loadgen.run_load(int(port), _api_key(root, release), bodies,
                            _count(concurrency, "concurrency", 4096), float(limit_s),
                            float(request_timeout_s), keep_text=True)


def op_sample(root: str, engine_units: list[str], metrics_port: Optional[int]) -> dict[str, Any]:
    return loadgen.sample_node(root, list(engine_units), metrics_port)


def op_soak(root: str, release: str, port: int, model: str, profile: dict[str, Any],
            vocab: int, duration_s: float, sample_s: float, engine_units: list[str],
            metrics_port: Optional[int], request_timeout_s: float) -> dict[str, Any]:
    batch = max(64, int(profile["concurrency"]) * 8)
    requests = _profile_requests(profile, model, _count(vocab, "vocab", 1 << 24), batch)
    samples: list[dict[str, Any]] = []

    def tick() -> None:
        samples.append(loadgen.sample_node(root, list(engine_units), metrics_port))

    tick()
    ran = loadgen.run_for(int(port), _api_key(root, release),
                          lambda i: requests[i % len(requests)],
                          _count(profile["concurrency"], "concurrency", 4096),
                          float(duration_s), float(request_timeout_s), keep_text=False,
                          on_tick=tick, tick_s=float(sample_s))
    tick()
    return {**ran, "samples": samples}


def op_store(root: str, release: str, stamp: str, record: dict[str, Any],
             html: Optional[str], event: dict[str, Any]) -> dict[str, Any]:
    return promotion_store.store(root, release, stamp, record, html, event)


def op_record(root: str, release: str, gate: str, passed_only: bool = True
              ) -> dict[str, Any]:
    """RELEASE's newest record of GATE (passing, by default), whole: what a later release
    is compared with when no head serves RELEASE any more."""
    return {"record": promotion_store.latest_record(root, release, gate, passed_only)}


OPS = {"locate": op_locate, "load": op_load, "tail": op_tail, "sample": op_sample,
       "soak": op_soak, "store": op_store, "record": op_record}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPS)
