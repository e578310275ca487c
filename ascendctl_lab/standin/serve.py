#!/usr/bin/python3
"""A stand-in for `vllm serve` (vLLM 0.32) on lab nodes: no model, no torch, seconds to start.

Installed on lab nodes as `vllm` by `ascendctl lab up --engine standin` for the
fault-matrix tests whose subject is the orchestration (deploy, rollback, gang recovery).
It reproduces what ascendctl and those tests observe of the real engine, and nothing else:

- the command line, as strictly as vLLM parses the flags ascendctl renders (an unknown
  flag: argparse's `vllm: error: unrecognized arguments: --x` on stderr, exit 2);
- multi-node MP mode as a gang: the head (node rank 0) listens on the master port at once
  and waits there for every follower before it "loads" (ASCENDCTL_STANDIN_START_S, default
  2 s) and serves; a `--headless` follower connects, retrying, and exits non-zero when the
  head goes away; when a follower goes away the head's next completion waits
  VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS for it, then the head exits non-zero (vLLM's engine
  core dies with its pipeline stage, noticed at its next step);
- HTTP on the head only: /health, /v1/models, /v1/completions (also streamed), /metrics,
  with the API key (--api-key, else VLLM_API_KEY) enforced on /v1 paths as vLLM does;
  completions are deterministic words, not a model's output;
- SIGTERM: a clean exit (status 0).

Standard library only; the shebang is the node's system Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Any, Optional

VERSION = "0.32.0"     # the lab's pinned vLLM (ascendctl_lab.image.VLLM_VERSION)
START_ENV = "ASCENDCTL_STANDIN_START_S"
DEFAULT_START_S = 2.0
# vLLM waits this long for its engine core to come up (vllm/envs.py); the stand-in bounds
# the head's wait for its followers and a follower's wait for its head by it.
READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
DEFAULT_READY_TIMEOUT_S = 600.0
EXECUTE_TIMEOUT_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"     # vllm/envs.py
DEFAULT_EXECUTE_TIMEOUT_S = 300.0
# vllm/entrypoints/serve/middleware/authenticate.py: paths under these need the key
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")
WORDS = ("the", "lab", "node", "rank", "serves", "a", "tiny", "stand", "in", "answer",
         "gang", "of", "two", "pipeline", "stages", "ready")


def log(level: str, message: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{level} {stamp} [stand-in] {message}", file=sys.stderr, flush=True)


# -- the command line ---------------------------------------------------------------------

def human_int(value: str) -> int:
    """vLLM's human_readable_int for --max-model-len: 256, 1k, 2K, 1m."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid human readable integer {value!r}")
    number, unit = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 1000, "m": 10 ** 6, "g": 10 ** 9, "K": 1024, "M": 1024 ** 2,
             "G": 1024 ** 3}[unit]
    return int(number * scale)


def json_value(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"invalid JSON {value[:60]!r}: {err}") from None


def parser() -> argparse.ArgumentParser:
    """`vllm` with its `serve` subcommand (vllm/entrypoints/cli/main.py, cli/serve.py),
    with the vLLM spelling, type and aliases of every flag ascendctl renders. Anything
    else is refused by argparse exactly as vLLM's FlexibleArgumentParser refuses it."""
    top = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version=VERSION)
    commands = top.add_subparsers(required=False, dest="subparser")
    serve = commands.add_parser("serve", usage="vllm serve [model_tag] [options]")
    flag = serve.add_argument
    boolean = argparse.BooleanOptionalAction
    flag("model_tag", nargs="?")
    flag("--host", default=None)
    flag("--port", type=int, default=8000)
    flag("--api-key", nargs="+", default=None)
    flag("--headless", action=boolean, default=False)
    flag("--api-server-count", "-asc", type=int, default=None)
    flag("--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"])
    flag("--nnodes", "-n", type=int, default=1)
    flag("--node-rank", "-r", type=int, default=0)
    flag("--master-addr", default="127.0.0.1")
    flag("--master-port", type=int, default=29501)
    flag("--tensor-parallel-size", "-tp", type=int, default=1)
    flag("--pipeline-parallel-size", "-pp", type=int, default=1)
    flag("--data-parallel-size", "-dp", type=int, default=1)
    flag("--data-parallel-size-local", "-dpl", type=int)
    flag("--data-parallel-start-rank", "-dpr", type=int)
    flag("--data-parallel-address", "-dpa")
    flag("--data-parallel-rpc-port", "-dpp", type=int)
    flag("--enable-expert-parallel", "-ep", action=boolean, default=False)
    flag("--max-num-seqs", type=int)
    flag("--max-model-len", type=human_int)
    flag("--max-num-batched-tokens", type=human_int)
    flag("--gpu-memory-utilization", type=float, default=0.9)
    flag("--enable-prefix-caching", action=boolean, default=None)
    flag("--enforce-eager", action=boolean, default=False)
    flag("--quantization", "-q")
    flag("--trust-remote-code", action=boolean, default=False)
    flag("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
         default="auto")
    flag("--served-model-name", nargs="+")
    flag("--speculative-config", type=json_value)
    flag("--compilation-config", "-cc", type=json_value)
    flag("--additional-config", type=json_value)
    flag("--seed", type=int)
    return top


def dashed(argv: list[str]) -> list[str]:
    """`--max_num_seqs 4` is `--max-num-seqs 4` (FlexibleArgumentParser.parse_args in
    vllm/utils/argparse_utils.py turns underscores in a flag's name into dashes)."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out


# -- the gang -----------------------------------------------------------------------------

def seconds_from_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((host, port))
    return sock


def die(message: str, code: int = 1) -> None:
    """The engine is dead: say why (the journal line ascendctl shows) and exit now."""
    log("ERROR", message)
    os._exit(code)


def watch_peer(conn: socket.socket, what: str) -> None:
    """A follower: block until the head's connection closes, then die (its workers are
    the head's children in vLLM's multi-node executor: they go with it)."""
    wait_closed(conn)
    die(f"RuntimeError: {what} went away; the engine core died with its pipeline stage")


def wait_closed(conn: socket.socket) -> None:
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass


LOST_STAGES: list[str] = []


def watch_follower(conn: socket.socket, what: str) -> None:
    """The head: vLLM watches only its local workers (start_worker_monitor in
    vllm/v1/executor/multiproc_executor.py); a remote stage that is gone shows when the
    next step waits VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS for it and the engine core dies."""
    wait_closed(conn)
    LOST_STAGES.append(what)


def gather_followers(args: argparse.Namespace, deadline: float) -> list[socket.socket]:
    """The head: wait on the master port until every node rank 1..nnodes-1 has joined."""
    server = listen_socket(args.master_addr, args.master_port)
    server.listen(64)
    missing = set(range(1, args.nnodes))
    joined: list[socket.socket] = []
    log("INFO", f"node rank 0 of {args.nnodes}: waiting on {args.master_addr}:"
                f"{args.master_port} for node rank(s) {sorted(missing)}")
    while missing:
        server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, peer = server.accept()
        except TimeoutError:
            die(f"TimeoutError: node rank(s) {sorted(missing)} did not join within "
                f"{seconds_from_env(READY_TIMEOUT_ENV, DEFAULT_READY_TIMEOUT_S):g} s")
        conn.settimeout(10)
        try:
            hello = json.loads(conn.makefile("r").readline() or "{}")
        except (OSError, ValueError):
            conn.close()
            continue
        rank, nnodes = hello.get("node_rank"), hello.get("nnodes")
        if nnodes != args.nnodes or rank not in missing:
            log("WARNING", f"refused a peer from {peer[0]} (node rank {rank} of {nnodes})")
            conn.close()
            continue
        conn.sendall(b"ok\n")
        conn.settimeout(None)
        missing.discard(rank)
        joined.append(conn)
        log("INFO", f"node rank {rank} joined from {peer[0]}")
        threading.Thread(target=watch_follower,
                         args=(conn, f"node rank {rank} ({peer[0]})"), daemon=True).start()
    # torch's store stays up for the engine's lifetime; so does this listener (the deploy
    # and the supervisor read a listening master port as "the head is up").
    threading.Thread(target=refuse_late_peers, args=(server,), daemon=True).start()
    return joined


def refuse_late_peers(server: socket.socket) -> None:
    server.settimeout(None)
    while True:
        try:
            conn, peer = server.accept()
        except OSError:
            return
        log("WARNING", f"refused a peer from {peer[0]}: the gang is complete")
        conn.close()


def join_head(args: argparse.Namespace, deadline: float) -> None:
    """A headless follower: connect to the head (retrying), then live as long as it does."""
    while True:
        try:
            conn = socket.create_connection((args.master_addr, args.master_port), timeout=5)
            conn.sendall((json.dumps({"node_rank": args.node_rank,
                                      "nnodes": args.nnodes}) + "\n").encode())
            if conn.makefile("r").readline().strip() == "ok":
                break
            conn.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            die(f"TimeoutError: no head at {args.master_addr}:{args.master_port} within "
                f"{seconds_from_env(READY_TIMEOUT_ENV, DEFAULT_READY_TIMEOUT_S):g} s")
        time.sleep(0.5)
    conn.settimeout(None)
    log("INFO", f"node rank {args.node_rank} of {args.nnodes} joined the head at "
                f"{args.master_addr}:{args.master_port} (headless: no API server)")
    watch_peer(conn, f"the head ({args.master_addr}:{args.master_port})")


# -- the API ------------------------------------------------------------------------------

class Engine:
    """What the API serves: the model's names, deterministic completions, the counters."""

    def __init__(self, args: argparse.Namespace, tokens: list[str]):
        self.model_root = args.model_tag
        self.names = list(args.served_model_name or [args.model_tag])
        self.max_model_len = args.max_model_len or 4096
        self.token_hashes = [hashlib.sha256(t.encode()).digest() for t in tokens]
        self.lock = threading.Lock()
        self.counters = {"prompt": 0, "generation": 0, "success": 0}

    def authorized(self, header: Optional[str]) -> bool:
        if not self.token_hashes:
            return True
        scheme, _, param = (header or "").partition(" ")
        if not header or scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(param.encode()).digest()
        return any(secrets.compare_digest(digest, t) for t in self.token_hashes)

    def models(self) -> dict:
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm",
             "root": self.model_root, "parent": None, "max_model_len": self.max_model_len,
             "permission": []} for name in self.names]}

    def words(self, prompt: str, count: int) -> list[str]:
        return [" " + WORDS[hashlib.sha256(f"{prompt}\0{i}".encode()).digest()[0] % len(WORDS)]
                for i in range(count)]

    def record(self, prompt_tokens: int, generated: int) -> None:
        with self.lock:
            self.counters["prompt"] += prompt_tokens
            self.counters["generation"] += generated
            self.counters["success"] += 1

    def metrics(self) -> str:
        """The vllm:* series ascendctl reads (names and types as vllm/v1/metrics/loggers.py
        exports them through prometheus_client)."""
        labels = f'engine="0",model_name="{self.names[0]}"'
        with self.lock:
            values = dict(self.counters)
        series = [("vllm:num_requests_running", "gauge", "", 0),
                  ("vllm:num_requests_waiting", "gauge", "", 0),
                  ("vllm:kv_cache_usage_perc", "gauge", "", 0.0),
                  ("vllm:prompt_tokens_total", "counter", "", values["prompt"]),
                  ("vllm:generation_tokens_total", "counter", "", values["generation"]),
                  ("vllm:request_success_total", "counter", ',finished_reason="length"',
                   values["success"])]
        lines = []
        for name, kind, extra, value in series:
            family = name[:-len("_total")] if kind == "counter" else name
            lines += [f"# HELP {family} {family} (ascendctl lab stand-in)",
                      f"# TYPE {family} {kind}", f"{name}{{{labels}{extra}}} {float(value)}"]
        return "\n".join(lines) + "\n"


class ApiServer(ThreadingMixIn, HTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve the host's FQDN; bind only (dual-stack on ::).
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.socket.bind(self.server_address)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


def handler_for(engine: Engine) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def guarded(self) -> bool:
            path = self.path.split("?", 1)[0]
            if path.startswith(GUARDED_PREFIX) and \
                    not engine.authorized(self.headers.get("Authorization")):
                self.reply(401, {"error": "Unauthorized"})
                return True
            return False

        def do_GET(self) -> None:
            if self.guarded():
                return
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self.reply(200, b"", "text/plain")
            elif path == "/v1/models":
                self.reply(200, engine.models())
            elif path == "/version":
                self.reply(200, {"version": VERSION})
            elif path == "/metrics":
                self.reply(200, engine.metrics().encode(), "text/plain; version=0.0.4")
            else:
                self.reply(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self.guarded():
                return
            if self.path.split("?", 1)[0] != "/v1/completions":
                self.reply(404, {"detail": "Not Found"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("the body is not a JSON object")
            except ValueError as err:
                self.reply(400, error_body(f"invalid request: {err}", "BadRequestError", 400))
                return
            self.complete(request)

        def complete(self, request: dict) -> None:
            model = request.get("model")
            if model not in engine.names:
                self.reply(404, error_body(f"The model `{model}` does not exist.",
                                           "NotFoundError", 404, param="model"))
                return
            prompt = request.get("prompt", "")
            prompt = " ".join(prompt) if isinstance(prompt, list) else str(prompt)
            prompt_tokens = max(1, len(prompt.split()))
            max_tokens = request.get("max_tokens")
            max_tokens = 16 if max_tokens is None else max_tokens
            if not isinstance(max_tokens, int) or max_tokens < 1 or \
                    prompt_tokens + max_tokens > engine.max_model_len:
                self.reply(400, error_body(
                    f"max_tokens {max_tokens!r} with {prompt_tokens} prompt tokens does not fit "
                    f"the model's context length {engine.max_model_len}", "BadRequestError",
                    400))
                return
            if LOST_STAGES:
                time.sleep(seconds_from_env(EXECUTE_TIMEOUT_ENV, DEFAULT_EXECUTE_TIMEOUT_S))
                die(f"TimeoutError: {LOST_STAGES[0]} did not answer within the execute "
                    "timeout; the engine core died with its pipeline stage")
            words = engine.words(prompt, max_tokens)
            ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
            engine.record(prompt_tokens, len(words))

            def choice(text: str, finish: Optional[str]) -> dict:
                return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                        "stop_reason": None}

            if not request.get("stream"):
                self.reply(200, {
                    "id": ident, "object": "text_completion", "created": created,
                    "model": model, "choices": [choice("".join(words), "length")],
                    "usage": {"prompt_tokens": prompt_tokens,
                              "total_tokens": prompt_tokens + len(words),
                              "completion_tokens": len(words)}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.end_headers()
            for i, word in enumerate(words):
                event = {"id": ident, "object": "text_completion", "created": created,
                         "model": model,
                         "choices": [choice(word, "length" if i == len(words) - 1 else None)]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


def error_body(message: str, kind: str, code: int, param: Optional[str] = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# -- main ---------------------------------------------------------------------------------

def on_sigterm(signum: int, _frame: Any) -> None:
    log("INFO", f"received {signal.Signals(signum).name}: shutting down")
    os._exit(0)


def refuse(args: argparse.Namespace) -> Optional[str]:
    """What the stand-in does not do (so it never pretends to)."""
    if args.data_parallel_size != 1:
        return "data parallel mode is not implemented by the lab stand-in; use the real engine"
    if args.distributed_executor_backend == "ray":
        return "the Ray executor is not implemented by the lab stand-in; use the real engine"
    if args.nnodes > 1 and not 0 <= args.node_rank < args.nnodes:
        return f"--node-rank {args.node_rank} is not in 0..{args.nnodes - 1}"
    if args.headless and args.node_rank == 0 and args.nnodes > 1:
        return "node rank 0 runs the API server; it cannot be --headless"
    model = args.model_tag
    if not model or not os.path.isfile(os.path.join(model, "config.json")):
        return f"no model at {model!r} (a directory with config.json)"
    return None


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(dashed(sys.argv[1:] if argv is None else argv))
    if args.subparser != "serve":
        parser().print_help()
        return 0
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigterm)
    log("INFO", f"vLLM stand-in {VERSION} (ascendctl lab; no model is loaded) "
                f"serving {args.model_tag}, node rank {args.node_rank} of {args.nnodes}")
    problem = refuse(args)
    if problem:
        log("ERROR", f"ValueError: {problem}")
        return 1
    deadline = time.monotonic() + seconds_from_env(READY_TIMEOUT_ENV, DEFAULT_READY_TIMEOUT_S)
    if args.headless:
        join_head(args, deadline)
        return 1
    # vLLM binds the API port before the engine starts and listens once it is ready
    # (setup_server in vllm/entrypoints/launchers/launcher.py): refused until then.
    host = args.host or "0.0.0.0"
    tokens = [key for key in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if key]
    server_class = type("ApiServer6", (ApiServer,), {"address_family": socket.AF_INET6}) \
        if ":" in host else ApiServer
    server = server_class((host, args.port), handler_for(Engine(args, tokens)),
                          bind_and_activate=False)
    server.server_bind()
    if args.nnodes > 1:
        gather_followers(args, deadline)
    time.sleep(max(0.0, seconds_from_env(START_ENV, DEFAULT_START_S)))
    server.server_activate()
    log("INFO", f"Starting vLLM API server on http://{host}:{args.port}")
    print("INFO:     Application startup complete.", file=sys.stderr, flush=True)
    server.serve_forever()
    return 1


if __name__ == "__main__":
    sys.exit(main())
