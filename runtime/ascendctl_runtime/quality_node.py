"""A serving node's half of the quality gate (standard library only; sent over SSH).

Operations (each one JSON call, one JSON answer; shipped by ascendctl/transport/nodecall.py):

    locate    the serving release (`current`), whether it has an API key, the release it
              replaced (from history.jsonl), and that release's latest passing gate record
              for the same prompt set (the reference "agree with previous" compares with)
    generate  the prompts at temperature 0 against this node's own API on 127.0.0.1, a
              bounded number at once, with the token ids vLLM returns (`return_token_ids`);
              the API key is read here from the release's 0600 secrets.env, never passed in
    store     the gate's record beside the release, plus one `quality` event in history.jsonl
    list      the latest gate record of each release (summaries), for `ascendctl history`

Records live in <root>/quality/<release>/<stamp>.json, not inside releases/<id>/ (a
release directory's files are its content, hashed to tell whether a deploy changes
anything); the directories of pruned releases go with them.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from ascendctl_runtime import layout
from ascendctl_runtime.nodeutil import answer_call, parse_env_file, write_atomic

STAMP_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z(-[0-9a-f]{4})?")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
DIGEST_RE = re.compile(r"[0-9a-f]{64}")
SWITCH_EVENTS = ("deployed", "rollback")
ERROR_BODY = 300
MAX_CONCURRENCY = 64
# What `list` keeps of a record (history shows these; the outputs stay on the node).
SUMMARY_KEYS = ("release", "stamp", "time", "by", "mode", "status", "summary", "agreement",
                "reference", "prompt_set", "counts", "node")


def _release_id(release: str) -> str:
    if not isinstance(release, str) or not ID_RE.fullmatch(release):
        raise ValueError(f"bad release id {release!r}")
    return release


def _quality_dir(root: str, release: str) -> str:
    return os.path.join(root, "quality", _release_id(release))


def _api_key(root: str, release: str) -> Optional[str]:
    path = os.path.join(root, layout.RELEASES_DIR, _release_id(release), layout.SECRETS_ENV)
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_env_file(handle.read()).get(layout.API_KEY_VAR) or None
    except FileNotFoundError:
        return None


def _history(root: str) -> list[dict[str, Any]]:
    events = []
    try:
        with open(os.path.join(root, layout.HISTORY_FILE), encoding="utf-8") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    events.append(event)
    except FileNotFoundError:
        pass
    return events


def previous_release(events: list[dict[str, Any]], release: str) -> Optional[str]:
    """The release `current` pointed at before RELEASE was last switched in."""
    for event in reversed(events):
        if event.get("event") in SWITCH_EVENTS and event.get("release") == release:
            previous = event.get("previous")
            return previous if isinstance(previous, str) and previous != release else None
    return None


def _records(root: str, release: str) -> list[tuple[str, str]]:
    """(stamp, path) of RELEASE's gate records, oldest first."""
    directory = _quality_dir(root, release)
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        if name.endswith(".json") and STAMP_RE.fullmatch(name[:-5]):
            found.append((name[:-5], os.path.join(directory, name)))
    return sorted(found)


def _load(path: str) -> Optional[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def reference_record(root: str, release: str, digest: str) -> Optional[dict[str, Any]]:
    """RELEASE's newest passing gate record of the prompt set DIGEST: its outputs."""
    for stamp, path in reversed(_records(root, release)):
        record = _load(path)
        if not record or record.get("status") != "pass":
            continue
        if (record.get("prompt_set") or {}).get("digest") != digest:
            continue
        outputs = {p["id"]: {"text": p.get("text"), "token_ids": p.get("token_ids")}
                   for p in record.get("prompts", []) if isinstance(p, dict) and "id" in p}
        return {"release": release, "stamp": stamp, "outputs": outputs}
    return None


def op_locate(root: str, digest: str, release: Optional[str] = None,
              previous: Optional[str] = None) -> dict[str, Any]:
    if not DIGEST_RE.fullmatch(digest):
        raise ValueError(f"bad prompt set digest {digest!r}")
    current = layout.current_release(root)
    release = release or current
    if release is None:
        return {"current": None, "release": None}
    _release_id(release)
    if previous is None:
        previous = previous_release(_history(root), release)
    else:
        _release_id(previous)
    return {
        "current": current,
        "release": release,
        "release_dir": os.path.join(root, layout.RELEASES_DIR, release),
        "release_exists": os.path.isdir(os.path.join(root, layout.RELEASES_DIR, release)),
        "api_key": _api_key(root, release) is not None,
        "previous": previous,
        "reference": reference_record(root, previous, digest) if previous else None,
    }


# -- generation -----------------------------------------------------------------------------

def request_body(prompt: dict[str, Any], model: str) -> tuple[str, dict[str, Any]]:
    """The endpoint and body of one greedy request (temperature 0, token ids returned)."""
    body: dict[str, Any] = {"model": model, "max_tokens": int(prompt["max_tokens"]),
                            "temperature": 0, "n": 1, "stream": False,
                            "return_token_ids": True}
    if prompt.get("messages") is not None:
        return "/v1/chat/completions", {**body, "messages": prompt["messages"]}
    return "/v1/completions", {**body, "prompt": prompt["prompt"]}


def parse_answer(answer: Any) -> dict[str, Any]:
    """Text, token ids and finish reason of a completion or chat completion answer."""
    try:
        choice = answer["choices"][0]
    except (TypeError, KeyError, IndexError):
        return {"error": f"no choices in the answer: {str(answer)[:ERROR_BODY]}"}
    if not isinstance(choice, dict):
        return {"error": f"no choices in the answer: {str(answer)[:ERROR_BODY]}"}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    token_ids = choice.get("token_ids")
    result: dict[str, Any] = {"text": text if isinstance(text, str) else "",
                              "finish_reason": choice.get("finish_reason")}
    # None when the engine does not support `return_token_ids` (the controller decides
    # whether it needs them: agreement does, expected answers do not)
    ok = isinstance(token_ids, list) and all(isinstance(t, int) for t in token_ids)
    result["token_ids"] = token_ids if ok else None
    return result


class Api:
    def __init__(self, port: int, api_key: Optional[str], timeout_s: float):
        self.base = f"http://127.0.0.1:{int(port)}"
        self.api_key = api_key
        self.timeout_s = timeout_s

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                         method="POST")
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, json.loads(response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode("utf-8", "replace")

    def redact(self, text: str) -> str:
        return text.replace(self.api_key, "[REDACTED]") if self.api_key else text


def generate_one(api: Api, model: str, prompt: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    path, body = request_body(prompt, model)
    try:
        status, answer = api.post(path, body)
    except (OSError, urllib.error.URLError, ValueError) as err:
        reason = getattr(err, "reason", err)
        kind = "timed out" if "timed out" in str(reason) else "failed"
        result: dict[str, Any] = {"error": f"{path} {kind}: {reason}"}
    else:
        if status != 200:
            result = {"error": f"{path} answered {status}: {str(answer)[:ERROR_BODY]}"}
        else:
            result = parse_answer(answer)
    if "error" in result:
        result["error"] = api.redact(str(result["error"]))
    result.update(id=prompt["id"], seconds=round(time.monotonic() - started, 3))
    return result


def op_generate(root: str, release: str, port: int, model: str, prompts: list[dict[str, Any]],
                concurrency: int, timeout_s: float) -> dict[str, Any]:
    """PROMPTS against the engine serving RELEASE on this node; one answer per prompt."""
    current = layout.current_release(root)
    if current != _release_id(release):
        raise ValueError(f"this node serves {current or 'nothing'}, not {release}")
    api = Api(port, _api_key(root, release), float(timeout_s))
    workers = max(1, min(int(concurrency), MAX_CONCURRENCY, len(prompts) or 1))
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        outputs = list(pool.map(lambda p: generate_one(api, model, p), prompts))
    return {"release": release, "outputs": outputs,
            "seconds": round(time.monotonic() - started, 3)}


# -- records ---------------------------------------------------------------------------------

def op_store(root: str, release: str, stamp: str, record: dict[str, Any],
             event: dict[str, Any]) -> dict[str, Any]:
    if not STAMP_RE.fullmatch(stamp):
        raise ValueError(f"bad stamp {stamp!r}")
    path = os.path.join(_quality_dir(root, release), f"{stamp}.json")
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    with open(os.path.join(root, layout.HISTORY_FILE), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**event, "file": path}, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    releases = os.path.join(root, layout.RELEASES_DIR)
    removed = []
    for name in sorted(os.listdir(os.path.join(root, "quality"))):
        if ID_RE.fullmatch(name) and not os.path.isdir(os.path.join(releases, name)):
            shutil.rmtree(os.path.join(root, "quality", name), ignore_errors=True)
            removed.append(name)
    return {"path": path, "pruned": removed}


def op_list(root: str) -> dict[str, Any]:
    """Each release's newest gate record, without its outputs."""
    latest: dict[str, dict[str, Any]] = {}
    base = os.path.join(root, "quality")
    if os.path.isdir(base):
        for release in sorted(os.listdir(base)):
            if not ID_RE.fullmatch(release):
                continue
            for _stamp, path in reversed(_records(root, release)):
                record = _load(path)
                if record is not None:
                    latest[release] = {k: record.get(k) for k in SUMMARY_KEYS}
                    latest[release]["file"] = path
                    break
    return {"latest": latest}


OPERATIONS = {"locate": op_locate, "generate": op_generate, "store": op_store, "list": op_list}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)
