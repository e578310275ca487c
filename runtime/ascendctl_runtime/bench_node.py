"""The head node's half of `ascendctl bench` (standard library only; sent over SSH).

Operations (each one JSON call, one JSON answer; shipped by ascendctl/transport/nodecall.py):

    locate   the serving release (`current`), its model directory, whether the bench
             executable exists and whether the release has an API key
    run      `vllm bench serve ...` with the API key from the release's 0600 secrets.env
             in the child's environment (OPENAI_API_KEY, which vLLM's client sends as a
             Bearer token): never on a command line, never in what is printed back
    store    the verdict next to vLLM's own result, plus one `bench` event in history.jsonl
    list     the stored bench records (newest last), for `ascendctl history`

Results live in <root>/bench/<release>/<stamp>.json (ascendctl's record) and
<stamp>.vllm.json (vLLM's own result file). Not inside releases/<id>/: a release
directory's files are its content (hashed to tell whether a deploy changes anything).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

from ascendctl_runtime import layout
from ascendctl_runtime.nodeutil import answer_call, parse_env_file, write_atomic

SECRET_KEYS = (layout.API_KEY_VAR,)
STAMP_RE = re.compile(r"^[0-9]{8}T[0-9]{6}Z(-[0-9a-f]{4})?$")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
OUTPUT_TAIL = 4000


def _release_dir(root: str, release: str) -> str:
    if not ID_RE.fullmatch(release):
        raise ValueError(f"bad release id {release!r}")
    return os.path.join(root, layout.RELEASES_DIR, release)


def _bench_dir(root: str, release: str) -> str:
    if not ID_RE.fullmatch(release):
        raise ValueError(f"bad release id {release!r}")
    return os.path.join(root, "bench", release)


def _secrets(release_dir: str) -> dict[str, str]:
    try:
        with open(os.path.join(release_dir, layout.SECRETS_ENV), encoding="utf-8") as handle:
            values = parse_env_file(handle.read())
    except FileNotFoundError:
        return {}
    return {k: v for k, v in values.items() if k in SECRET_KEYS and v}


def _redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "[REDACTED]")
    return text


def op_locate(root: str, bench: str) -> dict[str, Any]:
    release = layout.current_release(root)
    if release is None:
        return {"release": None}
    directory = _release_dir(root, release)
    model = os.path.join(directory, "model")
    found = bench if "/" in bench else shutil.which(bench)
    return {
        "release": release,
        "release_dir": directory,
        "model_dir": model,
        "model_ok": os.path.isdir(model) and os.path.exists(os.path.join(model, "config.json")),
        "bench_path": found,
        "bench_ok": bool(found) and os.access(found, os.X_OK),
        "api_key": bool(_secrets(directory)),
    }


def op_run(root: str, release: str, argv: list[str], stamp: str, limit_s: float
           ) -> dict[str, Any]:
    """Run the benchmark; vLLM saves its result in the release's bench directory."""
    if not STAMP_RE.fullmatch(stamp):
        raise ValueError(f"bad stamp {stamp!r}")
    directory = _release_dir(root, release)
    secrets = _secrets(directory)
    out_dir = _bench_dir(root, release)
    os.makedirs(out_dir, exist_ok=True)
    result_file = f"{stamp}.vllm.json"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",) + SECRET_KEYS}
    # The model and tokenizer are on local disk; a benchmark must never try a download.
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"})
    if layout.API_KEY_VAR in secrets:
        env["OPENAI_API_KEY"] = secrets[layout.API_KEY_VAR]
    command = list(argv) + ["--save-result", "--result-dir", out_dir,
                            "--result-filename", result_file]
    work = tempfile.mkdtemp(prefix=".work-", dir=out_dir)
    started = time.time()
    try:
        done = subprocess.run(command, env=env, cwd=work, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=limit_s)
        code, output = done.returncode, done.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as err:
        code = None
        output = (err.stdout or b"").decode("utf-8", "replace") + \
            f"\n[ascendctl: the benchmark did not finish within {limit_s:g} s]"
    except OSError as err:
        code, output = 127, f"{command[0]}: {err.strerror}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    output = _redact(output, list(secrets.values()))
    path = os.path.join(out_dir, result_file)
    result = None
    if code == 0 and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            result = json.load(handle)
    return {"exit": code, "seconds": round(time.time() - started, 3),
            "output_tail": output[-OUTPUT_TAIL:], "result": result,
            "result_path": path if result is not None else None}


def op_store(root: str, release: str, stamp: str, record: dict[str, Any],
             event: dict[str, Any]) -> dict[str, Any]:
    if not STAMP_RE.fullmatch(stamp):
        raise ValueError(f"bad stamp {stamp!r}")
    out_dir = _bench_dir(root, release)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{stamp}.json")
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    with open(os.path.join(root, layout.HISTORY_FILE), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**event, "file": path}, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    # Bench results of releases that were pruned go with them.
    releases = os.path.join(root, layout.RELEASES_DIR)
    removed = []
    for name in os.listdir(os.path.join(root, "bench")):
        if ID_RE.fullmatch(name) and not os.path.isdir(os.path.join(releases, name)):
            shutil.rmtree(os.path.join(root, "bench", name), ignore_errors=True)
            removed.append(name)
    return {"path": path, "pruned": removed}


def op_list(root: str, per_release: int = 5) -> dict[str, Any]:
    base = os.path.join(root, "bench")
    records: dict[str, list[dict[str, Any]]] = {}
    if os.path.isdir(base):
        for release in sorted(os.listdir(base)):
            directory = os.path.join(base, release)
            if not ID_RE.fullmatch(release) or not os.path.isdir(directory):
                continue
            names = sorted(n for n in os.listdir(directory)
                           if n.endswith(".json") and not n.endswith(".vllm.json")
                           and STAMP_RE.fullmatch(n[:-5]))
            for name in names[-per_release:]:
                try:
                    with open(os.path.join(directory, name), encoding="utf-8") as handle:
                        records.setdefault(release, []).append(json.load(handle))
                except (OSError, ValueError):
                    continue
    return {"records": records}


OPERATIONS = {"locate": op_locate, "run": op_run, "store": op_store, "list": op_list}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)
